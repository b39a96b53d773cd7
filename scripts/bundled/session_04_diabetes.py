"""Diabetes progression: a student tries regression models on load_diabetes.

A 1-D feature passed to fit (ValueError), a function called before it is defined (NameError), an
rmse helper refined, polynomial features that blow up the column count, an Experiment dataclass, a
generator of alphas, residual plots, a long printed table, an accidental cell deleted, out-of-order
re-runs of an earlier cell after changing the data.
"""

# ruff: noqa: E501
from __future__ import annotations

from script import SessionScript, delete, md, pause, restart, run, save

SESSION = SessionScript(
    slug="diabetes-regression",
    notebook_name="diabetes_regression.ipynb",
    user_id="student_8",
    expert=False,
    start="2023-05-08 13:02:15",
    task="diabetes regression",
)

SESSION.steps = [
    md("title", "# Diabetes progression\nRegression of disease progression one year after baseline."),
    run("imports", "import numpy as np\nimport pandas as pd\nfrom sklearn.datasets import load_diabetes"),
    run("load", "diabetes = load_diabetes()\nprint(diabetes.DESCR[:800])"),
    run("frame", "X = pd.DataFrame(diabetes.data, columns=diabetes.feature_names)\ny = diabetes.target\nX.head()"),
    run("frame_shape", "X.shape, y.shape, y[:10]"),
    run("stats", "X.describe().loc[['mean', 'std']]"),
    run("stats", "X.describe().loc[['mean', 'std']].round(3)"),
    run("target_stats", "pd.Series(y).describe()"),
    run(
        "imports",
        "import numpy as np\nimport pandas as pd\nimport matplotlib.pyplot as plt\nfrom sklearn.datasets import load_diabetes",
    ),
    run(
        "scatter",
        """
        fig, axes = plt.subplots(2, 5, figsize=(12, 5))
        for ax, col in zip(axes.ravel(), X.columns):
            ax.scatter(X[col], y, s=4)
            ax.set_title(col)
        plt.tight_layout()
        """,
    ),
    run("corr", "X.assign(target=y).corr()['target'].sort_values(ascending=False)"),
    md("lin_md", "## One feature first: bmi"),
    run("bmi_fit", "from sklearn.linear_model import LinearRegression\nlin = LinearRegression().fit(X['bmi'], y)"),
    run(
        "bmi_fit",
        "from sklearn.linear_model import LinearRegression\nlin = LinearRegression().fit(X[['bmi']], y)\nlin.coef_, lin.intercept_",
    ),
    run("bmi_score", "print(rmse(y, lin.predict(X[['bmi']])))"),
    run(
        "rmse",
        """
        def rmse(a, b):
            return np.sqrt(((a - b) ** 2).mean())
        """,
        after="bmi_fit",
    ),
    run("bmi_score"),
    run("bmi_score", "print(round(rmse(y, lin.predict(X[['bmi']])), 2), round(lin.score(X[['bmi']], y), 3))"),
    run(
        "bmi_plot",
        """
        xs = np.linspace(X['bmi'].min(), X['bmi'].max(), 50).reshape(-1, 1)
        plt.figure(figsize=(4, 3))
        plt.scatter(X['bmi'], y, s=4, alpha=0.5)
        plt.plot(xs, lin.predict(xs), color='red')
        plt.show()
        """,
    ),
    run(
        "bmi_plot",
        """
        xs = pd.DataFrame({'bmi': np.linspace(X['bmi'].min(), X['bmi'].max(), 50)})
        plt.figure(figsize=(4, 3))
        plt.scatter(X['bmi'], y, s=4, alpha=0.5)
        plt.plot(xs['bmi'], lin.predict(xs), color='red')
        plt.show()
        """,
    ),
    md("all_md", "## All features, proper split"),
    run(
        "split",
        """
        from sklearn.model_selection import train_test_split
        X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=1)
        X_train.shape
        """,
    ),
    run(
        "full_lin",
        "lin_all = LinearRegression().fit(X_train, y_train)\nrmse(y_test, lin_all.predict(X_test)), lin_all.score(X_test, y_test)",
    ),
    run("coef", "pd.Series(lin_all.coef_, index=X.columns).round(1).sort_values()"),
    run(
        "rmse",
        """
        def rmse(a, b):
            a, b = np.asarray(a), np.asarray(b)
            return float(np.sqrt(((a - b) ** 2).mean()))
        """,
    ),
    run("full_lin"),
    run(
        "experiment",
        """
        from dataclasses import dataclass, field

        @dataclass
        class Experiment:
            name: str
            model: object
            features: list = field(default_factory=lambda: list(X.columns))

            def run(self):
                self.model.fit(X_train[self.features], y_train)
                pred = self.model.predict(X_test[self.features])
                return {'name': self.name, 'rmse': round(rmse(y_test, pred), 2), 'r2': round(self.model.score(X_test[self.features], y_test), 3)}
        """,
    ),
    run("exp_runs", "Experiment('linear', LinearRegression()).run()"),
    run(
        "exp_runs",
        """
        from sklearn.linear_model import Ridge, Lasso
        experiments = [
            Experiment('linear', LinearRegression()),
            Experiment('ridge', Ridge(alpha=1.0)),
            Experiment('lasso', Lasso(alpha=0.1)),
            Experiment('bmi+s5', LinearRegression(), ['bmi', 's5']),
        ]
        results = pd.DataFrame([e.run() for e in experiments])
        results
        """,
    ),
    run(
        "alphas",
        """
        def alphas(start=1e-3, stop=10, n=6):
            a = start
            factor = (stop / start) ** (1 / (n - 1))
            for _ in range(n):
                yield round(a, 6)
                a *= factor

        list(alphas())
        """,
    ),
    run(
        "sweep",
        """
        for a in alphas():
            r = Experiment(f'ridge_{a}', Ridge(alpha=a)).run()
            print(r)
        """,
    ),
    run(
        "sweep",
        """
        sweep = pd.DataFrame([Experiment(f'ridge', Ridge(alpha=a)).run() | {'alpha': a} for a in alphas(n=10)])
        sweep
        """,
    ),
    run("sweep_best", "sweep.loc[sweep.rmse.idxmin()]"),
    run(
        "sweep_plot",
        """
        plt.figure(figsize=(4, 3))
        plt.semilogx(sweep.alpha, sweep.rmse, marker='.')
        plt.xlabel('alpha'); plt.ylabel('test RMSE')
        plt.show()
        """,
    ),
    save(),
    pause(6),
    md("fe_md", "## Feature engineering"),
    run(
        "poly",
        "from sklearn.preprocessing import PolynomialFeatures\npoly = PolynomialFeatures(3)\nXp = poly.fit_transform(X)\nXp.shape",
    ),
    run(
        "poly",
        "from sklearn.preprocessing import PolynomialFeatures\npoly = PolynomialFeatures(2, include_bias=False)\nXp = poly.fit_transform(X)\nXp.shape",
    ),
    run("poly_names", "poly.get_feature_names_out()[:15]"),
    run(
        "inter",
        """
        X['bmi_bp'] = X['bmi'] * X['bp']
        X['bmi_s5'] = X['bmi'] * X['s5']
        X.shape
        """,
    ),
    run("split"),
    run("exp_runs"),
    run(
        "exp_runs",
        "experiments.append(Experiment('linear+inter', LinearRegression()))\nresults = pd.DataFrame([e.run() for e in experiments])\nresults",
    ),
    run("features_default", "experiments[0].features == experiments[-1].features, len(experiments[-1].features)"),
    run("oops", "X = X.drop(columns=['bmi_bp', 'bmi_s5', 'bmi_age'])"),
    run("oops", "X = X.drop(columns=['bmi_bp', 'bmi_s5'])\nX.shape"),
    delete("oops"),
    restart(),
    run("imports"),
    run("frame"),
    run("load"),
    run("frame"),
    run("rmse"),
    run("inter", "X['bmi_bp'] = X['bmi'] * X['bp']\nX.shape"),
    run("split"),
    run("experiment"),
    run(
        "exp_runs",
        """
        from sklearn.linear_model import Ridge, Lasso
        experiments = [
            Experiment('linear', LinearRegression()),
            Experiment('ridge', Ridge(alpha=1.0)),
            Experiment('lasso', Lasso(alpha=0.1)),
            Experiment('bmi+s5', LinearRegression(), ['bmi', 's5']),
            Experiment('bmi+bp+bmi_bp', LinearRegression(), ['bmi', 'bp', 'bmi_bp']),
        ]
        results = pd.DataFrame([e.run() for e in experiments])
        results
        """,
    ),
    run("alphas"),
    run("sweep"),
    run("sweep_best"),
    run(
        "residuals",
        """
        best = Ridge(alpha=sweep.loc[sweep.rmse.idxmin(), 'alpha']).fit(X_train, y_train)
        res = y_test - best.predict(X_test)
        fig, ax = plt.subplots(1, 2, figsize=(8, 3))
        ax[0].scatter(best.predict(X_test), res, s=6)
        ax[0].axhline(0, color='k')
        ax[1].hist(res, bins=20)
        plt.show()
        """,
    ),
    run("res_stats", "print(pd.Series(res).describe().round(2).to_string())"),
    run(
        "table",
        """
        pred = best.predict(X_test)
        for i, (t, p) in enumerate(zip(y_test, pred)):
            print(f'{i:3d}  true={t:6.1f}  pred={p:6.1f}  err={t - p:+7.1f}')
        """,
    ),
    run("worst", "np.argsort(-np.abs(res))[:5], np.abs(res).max().round(1)"),
    md("end", "Ridge with a small alpha and a bmi*bp term: RMSE ~ see above. Not much better than linear."),
    save(),
]
