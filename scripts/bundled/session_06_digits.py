"""Handwritten digits: a student classifies load_digits with k-NN and an SVM.

Images reshaped the wrong way (ValueError), an index past the end (IndexError), a misspelt keyword
(TypeError), PCA to 2-D with a scatter plot, a k sweep refined into a function, misclassified digits
shown as images, a helper lambda, the kernel restarted after a long loop was edited, and cells
re-run out of order after changing the split.
"""

# ruff: noqa: E501
from __future__ import annotations

from script import SessionScript, delete, md, restart, run, save

SESSION = SessionScript(
    slug="digits-knn-svm",
    notebook_name="digits.ipynb",
    user_id="student_11",
    expert=False,
    start="2023-05-09 15:31:09",
    task="digits classification",
)

SESSION.steps = [
    md("title", "# Digits\n8x8 images of handwritten digits, 10 classes."),
    run("imports", "import numpy as np\nimport matplotlib.pyplot as plt\nfrom sklearn.datasets import load_digits"),
    run("load", "digits = load_digits()\ndigits.data.shape, digits.images.shape, digits.target.shape"),
    run("one", "digits.images[0]"),
    run("one", "plt.imshow(digits.images[0], cmap='gray_r')\nplt.title(digits.target[0])"),
    run(
        "grid_imgs",
        """
        fig, axes = plt.subplots(2, 5, figsize=(6, 3))
        for ax, img, label in zip(axes.ravel(), digits.images, digits.target):
            ax.imshow(img, cmap='gray_r')
            ax.set_title(label)
            ax.axis('off')
        plt.show()
        """,
    ),
    run("counts", "np.bincount(digits.target)"),
    run("pixel", "digits.data[0].reshape(8, 7)"),
    run("pixel", "digits.data[0].reshape(8, 8).astype(int)"),
    run("last", "digits.images[1797]"),
    run("last", "digits.images[-1].astype(int), digits.target[-1]"),
    md("split_md", "## Split and k-NN"),
    run(
        "split",
        """
        from sklearn.model_selection import train_test_split
        X_train, X_test, y_train, y_test = train_test_split(digits.data, digits.target, test_size=0.3, random_state=3)
        X_train.shape, X_test.shape
        """,
    ),
    run("knn", "from sklearn.neighbors import KNeighborsClassifier\nknn = KNeighborsClassifier(n_neighbor=3)"),
    run(
        "knn",
        "from sklearn.neighbors import KNeighborsClassifier\nknn = KNeighborsClassifier(n_neighbors=3).fit(X_train, y_train)\nknn.score(X_test, y_test)",
    ),
    run(
        "k_sweep",
        """
        for k in range(1, 10, 2):
            print(k, KNeighborsClassifier(n_neighbors=k).fit(X_train, y_train).score(X_test, y_test))
        """,
    ),
    run(
        "k_sweep",
        """
        def sweep_k(ks, X_tr=X_train, y_tr=y_train, X_te=X_test, y_te=y_test):
            return {k: round(KNeighborsClassifier(n_neighbors=k).fit(X_tr, y_tr).score(X_te, y_te), 4) for k in ks}

        sweep_k(range(1, 10, 2))
        """,
    ),
    run("k_sweep2", "best_k = max(sweep_k(range(1, 16)).items(), key=lambda kv: kv[1])\nbest_k"),
    md("svm_md", "## SVM"),
    run("svm", "from sklearn.svm import SVC\nsvm = SVC().fit(X_train, y_train)\nsvm.score(X_test, y_test)"),
    run(
        "svm_gamma",
        "for g in [0.0001, 0.001, 0.01, 0.1]:\n    print(g, SVC(gamma=g).fit(X_train, y_train).score(X_test, y_test))",
    ),
    run(
        "confusion",
        """
        from sklearn.metrics import confusion_matrix
        pred = svm.predict(X_test)
        confusion_matrix(y_test, pred)
        """,
    ),
    run("wrong_idx", "wrong = np.where(pred != y_test)[0]\nlen(wrong), wrong[:10]"),
    run(
        "show_wrong",
        """
        fig, axes = plt.subplots(1, len(wrong), figsize=(2 * len(wrong), 2))
        for ax, i in zip(np.atleast_1d(axes), wrong):
            ax.imshow(X_test[i].reshape(8, 8), cmap='gray_r')
            ax.set_title(f'{y_test[i]} -> {pred[i]}')
            ax.axis('off')
        plt.show()
        """,
    ),
    run("acc", "acc = lambda model: round(model.score(X_test, y_test), 4)\nacc(knn), acc(svm)"),
    save(),
    md("pca_md", "## PCA to 2-D"),
    run(
        "pca",
        "from sklearn.decomposition import PCA\npca = PCA(2)\nZ = pca.fit_transform(digits.data)\nZ.shape, pca.explained_variance_ratio_.round(3)",
    ),
    run(
        "pca_plot",
        """
        plt.figure(figsize=(5, 4))
        plt.scatter(Z[:, 0], Z[:, 1], c=digits.target, cmap='tab10', s=5)
        plt.colorbar()
        plt.show()
        """,
    ),
    run("pca_var", "PCA().fit(digits.data).explained_variance_ratio_.cumsum()[[9, 19, 29]].round(3)"),
    run(
        "pca_knn",
        """
        from sklearn.pipeline import make_pipeline
        pk = make_pipeline(PCA(20), KNeighborsClassifier(n_neighbors=best_k[0])).fit(X_train, y_train)
        acc(pk)
        """,
    ),
    run("scratch", "for i in range(len(X_test)):\n    if pred[i] != y_test[i]:\n        print(i, y_test[i], pred[i])"),
    run(
        "scratch",
        "for i in range(len(X_test)):\n    if pred[i] != y_test[i]:\n        print(f'test #{i}: true {y_test[i]}, predicted {pred[i]}')",
    ),
    delete("scratch"),
    restart(),
    run("imports"),
    run("load"),
    run(
        "split",
        "from sklearn.model_selection import train_test_split\nX_train, X_test, y_train, y_test = train_test_split(digits.data, digits.target, test_size=0.3, random_state=3, stratify=digits.target)\nX_train.shape, X_test.shape",
    ),
    run("knn"),
    run("svm"),
    run("acc"),
    run("k_sweep"),
    run("k_sweep2"),
    run("pca"),
    run("pca_knn"),
    run("confusion"),
    run("wrong_idx"),
    run("show_wrong"),
    run("svm_gamma"),
    run("final", "results = {'knn': acc(knn), 'svm': acc(svm), 'pca+knn': acc(pk)}\nresults"),
    run(
        "final",
        "results = {'knn': acc(knn), 'svm': acc(svm), 'pca+knn': acc(pk)}\nsorted(results.items(), key=lambda kv: -kv[1])",
    ),
    md("end", "SVM with default gamma wins; PCA(20)+kNN close behind."),
    save(),
]
