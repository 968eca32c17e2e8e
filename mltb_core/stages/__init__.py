"""The trial environment: what a trial's tool calls are run and checked against, below the planners.

``specs`` declares the ten stages (light: prompts and the tables read it without pandas); ``masking`` the
tools each stage offers; ``rewards`` the stage checks, their rewards and the submission check; ``workspace``
the scratchpad a trial's calls run in (inside the tool worker). The worker and the planners both import this
layer; it imports nothing from :mod:`mltb_core.planners` or :mod:`mltb_core.runner`.
"""
