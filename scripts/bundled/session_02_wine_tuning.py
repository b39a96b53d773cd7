"""Wine cultivars, second sitting: the same student reopens the notebook the next morning.

A new kernel: the first cells run again (one out of order: the model before the data, NameError), then
hyperparameter tuning with a grid search, a confusion matrix, a small results-tracking class that is
refined, a generator of parameter settings, an AttributeError from a missing underscore, a TypeError, a
kernel restart after a messed-up namespace, and cleanup of scratch cells.
"""

# ruff: noqa: E501
from __future__ import annotations

from script import SessionScript, delete, md, pause, restart, run, save

SESSION = SessionScript(
    slug="wine-tuning",
    notebook_name="wine_classification.ipynb",
    user_id="student_3",
    expert=False,
    start="2023-05-07 09:41:03",
    task="wine classification",
    continues="wine-first-look",
)

SESSION.steps = [
    run("logreg"),
    run("imports"),
    run("load"),
    run("target"),
    run("split"),
    run("scale"),
    run("logreg"),
    run("score"),
    run("rf"),
    run("compare"),
    run("cv"),
    run("compare"),
    md("tuning_md", "## Tuning\nTry a grid over C for the logistic regression and the forest's depth."),
    run(
        "grid",
        """
        from sklearn.model_selection import GridSearchCV
        pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
        grid = GridSearchCV(pipe, {'logisticregression__C': [0.01, 0.1, 1, 10]}, cv=5)
        grid.fit(X_train, y_train)
        grid.best_params
        """,
    ),
    run(
        "grid",
        """
        from sklearn.model_selection import GridSearchCV
        pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
        grid = GridSearchCV(pipe, {'logisticregression__C': [0.01, 0.1, 1, 10]}, cv=5)
        grid.fit(X_train, y_train)
        grid.best_params_
        """,
    ),
    run("grid_score", "grid.best_score_"),
    run("grid_score", "grid.best_score_, grid.score(X_test, y_test)"),
    run(
        "cv_table",
        "pd.DataFrame(grid.cv_results_)[['param_logisticregression__C', 'mean_test_score', 'std_test_score', 'rank_test_score']]",
    ),
    run(
        "rf_grid",
        """
        rf_grid = GridSearchCV(RandomForestClassifier(random_state=0), {'max_depth': [2, 4, None], 'n_estimators': [50, 100]}, cv=5)
        rf_grid.fit(X_train, y_train)
        rf_grid.best_params_, rf_grid.best_score_
        """,
    ),
    run(
        "confusion",
        """
        from sklearn.metrics import confusion_matrix
        cm = confusion_matrix(y_test, grid.predict(X_test))
        cm
        """,
    ),
    run(
        "cm_plot",
        """
        from sklearn.metrics import ConfusionMatrixDisplay
        ConfusionMatrixDisplay(cm, display_labels=data.target_names).plot()
        plt.show()
        """,
    ),
    run(
        "cm_plot",
        """
        from sklearn.metrics import ConfusionMatrixDisplay
        fig, ax = plt.subplots(figsize=(4, 4))
        ConfusionMatrixDisplay(cm, display_labels=data.target_names).plot(ax=ax, colorbar=False)
        plt.show()
        """,
    ),
    md("log_md", "Keep track of what I tried:"),
    run(
        "tracker",
        """
        class Tracker:
            def __init__(self):
                self.rows = []

            def add(self, name, model):
                self.rows.append({'model': name, 'cv': cross_val_score(model, X, y, cv=5).mean()})

            def table(self):
                return pd.DataFrame(self.rows)
        """,
    ),
    run(
        "track",
        "tracker = Tracker()\ntracker.add('logreg', grid.best_estimator_)\ntracker.add('rf', rf_grid.best_estimator_)\ntracker.table()",
    ),
    run(
        "track_more", "tracker.add('rf_shallow', RandomForestClassifier(max_depth=2, random_state=0))\ntracker.tabel()"
    ),
    run(
        "track_more", "tracker.add('rf_shallow', RandomForestClassifier(max_depth=2, random_state=0))\ntracker.table()"
    ),
    run(
        "tracker",
        """
        class Tracker:
            def __init__(self):
                self.rows = []

            def add(self, name, model, cv=5):
                scores = cross_val_score(model, X, y, cv=cv)
                self.rows.append({'model': name, 'cv': scores.mean(), 'std': scores.std()})
                return self

            def table(self):
                return pd.DataFrame(self.rows).sort_values('cv', ascending=False).round(4)
        """,
    ),
    run("track"),
    run(
        "track_more",
        "tracker.add('rf_shallow', RandomForestClassifier(max_depth=2, random_state=0), 10)\ntracker.table()",
    ),
    run(
        "track_more",
        "tracker.add('rf_shallow', RandomForestClassifier(max_depth=2, random_state=0), cv=10)\ntracker.table()",
    ),
    run("track_more", "tracker.add('rf_shallow', RandomForestClassifier(max_depth=2, random_state=0), cv='ten')"),
    run("track_more", "tracker.add('rf_shallow', RandomForestClassifier(max_depth=2, random_state=0), cv=5).table()"),
    run("track"),
    run(
        "settings",
        """
        def settings():
            for depth in [2, 3, 5]:
                for n in [25, 75]:
                    yield {'max_depth': depth, 'n_estimators': n}

        gen = settings()
        next(gen)
        """,
    ),
    run("settings_next", "next(gen)"),
    run("settings_next"),
    run(
        "settings_loop",
        """
        for params in gen:
            tracker.add(f"rf_{params['max_depth']}_{params['n_estimators']}", RandomForestClassifier(random_state=0, **params))
        tracker.table()
        """,
    ),
    run("settings_loop"),
    run("n_rows", "len(tracker.rows)"),
    save(),
    pause(12),
    run("scratch2", "del X_train_s\nclf.score(X_test_s, y_test)"),
    run("scratch2", "clf.predict(X_train_s[:3])"),
    restart(),
    run("imports", "%matplotlib inline\nimport pandas as pd\nimport numpy as np\nimport matplotlib.pyplot as plt"),
    run("load"),
    run("target"),
    run("split"),
    run("scale"),
    run("logreg"),
    run("score"),
    run("cv"),
    run("rf"),
    run("cv"),
    run("compare"),
    run("grid"),
    run("grid_score"),
    run("rf_grid"),
    run("tracker"),
    run("track"),
    delete("scratch2"),
    delete("settings_next"),
    run("final_md_check", "grid.best_estimator_.named_steps['logisticregression'].coef_.shape"),
    run(
        "final_md_check",
        "coef = pd.DataFrame(grid.best_estimator_.named_steps['logisticregression'].coef_.T, index=X.columns, columns=data.target_names)\ncoef.round(2)",
    ),
    md(
        "conclusion",
        "**Conclusion:** scaled logistic regression and the forest are both ~98% in CV; logreg is simpler.",
    ),
    save(),
]
