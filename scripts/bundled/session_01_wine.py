"""Wine cultivars, first sitting: a student explores load_wine and fits a first classifier.

Starts from an untitled notebook, renamed; a typo'd column (KeyError), a forgotten import (NameError),
a model fitted on unscaled data (ConvergenceWarning), a shape mismatch, a restart followed by re-running
what is needed, a helper refined twice, a scratch cell deleted.
"""

# ruff: noqa: E501  (cell sources are kept on one line where a person would write them so)
from __future__ import annotations

from script import SessionScript, delete, md, pause, rename, restart, run, save

SESSION = SessionScript(
    slug="wine-first-look",
    notebook_name="Untitled.ipynb",
    user_id="student_3",
    expert=False,
    start="2023-05-06 10:05:12",
    task="wine classification",
)

SESSION.steps = [
    rename("wine_classification.ipynb"),
    md("title", "# Wine classification\nPredict the cultivar (3 classes) from 13 chemical measurements."),
    run("imports", "import pandas as pd\nimport numpy as np"),
    run(
        "load",
        """
        from sklearn.datasets import load_wine
        data = load_wine()
        df = pd.DataFrame(data.data, columns=data.feature_names)
        df.head()
        """,
    ),
    run("shape", "df.shape"),
    run("shape", "df.columns"),
    run("target", "df['target'] = data.target\ndf.target.value_counts()"),
    run("describe", "df.describe()"),
    run("describe", "df.describe().T"),
    run("nulls", "df.isnull().sum().sum()"),
    run("info", "df.info()"),
    md("eda", "## A look at the features"),
    run("hist", "df['alcohol'].hist()"),
    run("hist", "plt.figure(figsize=(5, 3))\ndf['alcohol'].hist(bins=20)\nplt.title('alcohol')"),
    run("imports", "import pandas as pd\nimport numpy as np\nimport matplotlib.pyplot as plt"),
    run("hist", "plt.figure(figsize=(5, 3))\ndf['alcohol'].hist(bins=20)\nplt.title('alcohol')\nplt.show()"),
    run("by_class", "df.groupby('target')['colour_intensity'].mean()"),
    run("by_class", "df.groupby('target')['color_intensity'].mean()"),
    run("by_class", "df.groupby('target')[['alcohol', 'color_intensity', 'proline']].mean()"),
    run("corr", "df.corr()['target'].sort_values()"),
    run("corr", "df.corr()['target'].drop('target').abs().sort_values(ascending=False).head(5)"),
    run(
        "summarize",
        """
        def summarize(col):
            return df.groupby('target')[col].agg(['mean', 'std'])

        summarize('proline')
        """,
    ),
    run(
        "summarize",
        """
        def summarize(col):
            return df.groupby('target')[col].agg(['mean', 'std', 'min', 'max']).round(2)

        summarize('proline')
        """,
    ),
    run("scratch", "summarize('flavanoids')", after="summarize"),
    run("scratch", "for c in ['flavanoids', 'hue']:\n    print(summarize(c), '\\n')"),
    delete("scratch"),
    save(),
    md("model_md", "## First model"),
    run(
        "split",
        """
        from sklearn.model_selection import train_test_split
        X = df.drop(columns='target')
        y = df.target
        X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=42)
        """,
    ),
    run("split_shape", "X_train.shape, X_test.shape"),
    run("logreg", "clf = LogisticRegression()\nclf.fit(X_train, y_train)"),
    run(
        "logreg",
        "from sklearn.linear_model import LogisticRegression\nclf = LogisticRegression()\nclf.fit(X_train, y_train)",
    ),
    run("score", "clf.score(X_test, y_test)"),
    run(
        "scale",
        """
        from sklearn.preprocessing import StandardScaler
        scaler = StandardScaler()
        X_train_s = scaler.fit_transform(X_train)
        X_test_s = scaler.transform(X_test)
        X_train_s[:3].round(2)
        """,
        after="split_shape",
    ),
    run(
        "logreg",
        """
        from sklearn.linear_model import LogisticRegression
        clf = LogisticRegression(max_iter=1000)
        clf.fit(X_train_s, y_train)
        """,
    ),
    run("score", "clf.score(X_test_s, y_test)"),
    run("predict", "clf.predict(X_test_s[:, :5])"),
    run("predict", "clf.predict(X_test_s[:5])"),
    run("predict", "clf.predict(X_test_s[:5]), y_test[:5].values"),
    run(
        "report",
        "from sklearn.metrics import classification_report\nprint(classification_report(y_test, clf.predict(X_test_s)))",
    ),
    pause(4),
    restart(),
    run("imports"),
    run("load"),
    run("target"),
    run("split"),
    run("scale"),
    run("logreg"),
    run("score"),
    md("rf_md", "## Random forest"),
    run(
        "rf",
        """
        from sklearn.ensemble import RandomForestClassifier
        rf = RandomForestClassifier(random_state=0)
        rf.fit(X_train, y_train)
        rf.score(X_test, y_test)
        """,
    ),
    run(
        "importances",
        "imp = pd.Series(rf.feature_importances_, index=X.columns).sort_values(ascending=False)\nimp",
    ),
    run("imp_plot", "imp.plot.barh()"),
    run("imp_plot", "imp.sort_values().plot.barh(figsize=(5, 4))\nplt.tight_layout()\nplt.show()"),
    run(
        "n_trees",
        """
        for n in [10, 50, 100, 200]:
            m = RandomForestClassifier(n_estimators=n, random_state=0).fit(X_train, y_train)
            print(n, m.score(X_test, y_test))
        """,
    ),
    run(
        "cv",
        """
        from sklearn.model_selection import cross_val_score
        scores = cross_val_score(RandomForestClassifier(random_state=0), X, y, cv=5)
        scores
        """,
    ),
    run("cv_mean", "print(f'{scores.mean():.3f} +/- {scores.std():.3f}')"),
    run(
        "compare",
        """
        results = {}
        for name, model in [('logreg', LogisticRegression(max_iter=1000)), ('rf', rf)]:
            results[name] = cross_val_score(model, X, y, cv=5).mean()
        results
        """,
    ),
    run(
        "compare",
        """
        from sklearn.pipeline import make_pipeline
        results = {}
        models = {
            'logreg': make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)),
            'rf': RandomForestClassifier(random_state=0),
        }
        for name, model in models.items():
            results[name] = round(cross_val_score(model, X, y, cv=5).mean(), 4)
        results
        """,
    ),
    run("cv_mean"),
    save(),
]
