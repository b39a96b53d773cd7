"""Store sales: pandas wrangling on data the notebook generates itself (fixed seed).

Dates, groupby/pivot, merge with a lookup table, string cleanup, a TypeError from mixing str and int,
an AttributeError from a non-existent method, a KeyError from a typo'd column, a chunk generator,
a long printed report, the kernel restarted after a cell mutated the data twice, cells run out of
order, and a forecast with a simple regression on the month index.
"""

# ruff: noqa: E501
from __future__ import annotations

from script import SessionScript, delete, md, pause, rename, restart, run, save

SESSION = SessionScript(
    slug="sales-wrangling",
    notebook_name="Untitled1.ipynb",
    user_id="student_5",
    expert=False,
    start="2023-05-06 13:20:00",
    task="sales analysis (synthetic data)",
)

SESSION.steps = [
    run("imports", "import numpy as np\nimport pandas as pd"),
    run(
        "gen",
        """
        rng = np.random.default_rng(7)
        n = 2000
        sales = pd.DataFrame({
            'date': pd.to_datetime('2022-01-01') + pd.to_timedelta(rng.integers(0, 365, n), unit='D'),
            'store': rng.choice(['north', 'south', 'east', 'west'], n),
            'product': rng.choice(['A', 'B', 'C'], n, p=[0.5, 0.3, 0.2]),
            'units': rng.poisson(3, n) + 1,
        })
        sales.head()
        """,
    ),
    rename("store_sales.ipynb"),
    run("info", "sales.dtypes"),
    run("info", "sales.shape, sales.date.min(), sales.date.max()"),
    run(
        "prices",
        "prices = {'A': 9.99, 'B': 14.5, 'C': 30}\nsales['revenue'] = sales['units'] * sales['product'].map(prices)\nsales.head()",
    ),
    run("totals", "sales.groupby('store').revenue.sum()"),
    run("totals", "sales.groupby('store').revenue.sum().sort()"),
    run("totals", "sales.groupby('store').revenue.sum().sort_values(ascending=False).round(2)"),
    run("monthly", "sales['month'] = sales.date.dt.month\nmonthly = sales.groupby('month').revenue.sum()\nmonthly"),
    run("label", "print('Best month: ' + monthly.idxmax())"),
    run("label", "print('Best month: ' + str(monthly.idxmax()))"),
    run("label", "print(f'Best month: {monthly.idxmax()} ({monthly.max():,.2f})')"),
    md("pivot_md", "### Store x product"),
    run("pivot", "pd.pivot_table(sales, index='store', columns='product', values='units', aggfunc='sum')"),
    run(
        "pivot",
        "pt = pd.pivot_table(sales, index='store', columns='product', values='revenue', aggfunc='sum', margins=True)\npt.round(0)",
    ),
    run("share", "(pt.div(pt['All'], axis=0) * 100).round(1)"),
    run(
        "stores",
        """
        stores = pd.DataFrame({
            'store': ['north', 'south', 'east', 'west'],
            'manager': [' Ana ', 'bo', 'Chen', 'dmitri '],
            'sqm': [120, 95, 150, 80],
        })
        stores
        """,
    ),
    run("merge", "merged = sales.merge(stores, on='Store')"),
    run("merge", "merged = sales.merge(stores, on='store')\nmerged.shape"),
    run("clean", "stores['manager'] = stores.manager.str.strip().str.title()\nstores"),
    run("merge"),
    run(
        "per_sqm",
        "merged.groupby(['store', 'manager']).revenue.sum() / merged.groupby(['store', 'manager']).sqm.first()",
    ),
    run(
        "per_sqm",
        "per = merged.groupby(['store', 'manager']).agg(revenue=('revenue', 'sum'), sqm=('sqm', 'first'))\nper['per_sqm'] = (per.revenue / per.sqm).round(1)\nper.sort_values('per_sqm')",
    ),
    save(),
    md("plots_md", "### Plots"),
    run("plot_month", "import matplotlib.pyplot as plt\nmonthly.plot(kind='bar')"),
    run(
        "plot_month",
        "import matplotlib.pyplot as plt\nax = monthly.plot(kind='bar', figsize=(6, 3), color='tab:blue')\nax.set_ylabel('revenue')\nplt.show()",
    ),
    run(
        "plot_stores",
        """
        weekly = sales.set_index('date').groupby('store').resample('W').revenue.sum().unstack(0)
        weekly.plot(figsize=(7, 3))
        plt.show()
        """,
    ),
    run("weekly_shape", "weekly.shape"),
    run("weekly_shape", "weekly.shape, weekly.isna().sum().sum()"),
    md("discount_md", "Apply the 10% discount to product C (it started in July)."),
    run(
        "discount",
        "sales.loc[(sales['product'] == 'C') & (sales.month >= 7), 'revenue'] *= 0.9\nsales.revenue.sum().round(2)",
    ),
    run("discount"),
    run("check_c", "sales[sales['product'] == 'C'].groupby(sales.month >= 7).revenue.mean().round(2)"),
    md("restart_note", "Ran the discount twice. Restart and rerun."),
    restart(),
    run("imports", "import numpy as np\nimport pandas as pd\nimport matplotlib.pyplot as plt"),
    run("gen"),
    run("prices"),
    run("monthly"),
    run("discount"),
    run("check_c"),
    run("totals"),
    run("stores"),
    run("clean"),
    run("merge"),
    run("per_sqm"),
    pause(20),
    md("chunks_md", "### Report per quarter"),
    run(
        "chunks",
        """
        def quarters(df):
            for q, part in df.groupby(df.date.dt.quarter):
                yield q, part

        qs = quarters(sales)
        type(qs).__name__
        """,
    ),
    run(
        "report",
        """
        for q, part in qs:
            print(f'Q{q}: {len(part)} orders, revenue {part.revenue.sum():,.2f}')
            print(part.groupby('product').units.sum().to_string())
            print('-' * 30)
        """,
    ),
    run("report"),
    run("chunks"),
    run("report"),
    run(
        "daily",
        """
        daily = sales.groupby('date').revenue.sum()
        print(daily.rolling(7).mean().dropna().round(1).to_string())
        """,
    ),
    run(
        "daily",
        "daily = sales.groupby('date').revenue.sum().asfreq('D', fill_value=0)\nprint(daily.rolling(7).mean().dropna().round(1).head(40).to_string())",
    ),
    delete("restart_note"),
    md("fc_md", "### Forecast next quarter (naive linear trend on monthly revenue)"),
    run(
        "forecast",
        """
        from sklearn.linear_model import LinearRegression
        m = monthly.reset_index()
        trend = LinearRegression().fit(m[['month']], m['revenue'])
        future = pd.DataFrame({'month': [13, 14, 15]})
        trend.predict(future).round(2)
        """,
    ),
    run("forecast_coef", "trend.coef_[0].round(2), trend.intercept_.round(2)"),
    run("monthly"),
    run("forecast"),
    run("forecast_coef"),
    run(
        "forecast_plot",
        """
        plt.figure(figsize=(5, 3))
        plt.plot(m.month, m.revenue, marker='o', label='actual')
        plt.plot(future.month, trend.predict(future), marker='x', linestyle='--', label='forecast')
        plt.legend()
        plt.show()
        """,
    ),
    run(
        "export",
        "summary = {'total': round(sales.revenue.sum(), 2), 'best_store': per.per_sqm.idxmax(), 'orders': len(sales)}\nsummary",
    ),
    run(
        "export",
        "summary = {'total': round(float(sales.revenue.sum()), 2), 'best_store': per.per_sqm.idxmax()[0], 'orders': len(sales)}\nsummary",
    ),
    run("to_csv", "per.to_csv('per_store.csv')\npd.read_csv('per_store.csv').head()"),
    save(),
]
