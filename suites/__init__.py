"""The mltb benchmark (installed as ``mltb_suites``): ``pytest suites/`` in a checkout,
``pytest --pyargs mltb_suites`` from an installed package."""
