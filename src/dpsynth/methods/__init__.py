"""Training methods. Each method's trainer (``train(ctx: TrainContext) -> dict``, a stepper run by
``loop.run_training``) is named in the method registry, ``dpsynth.config.methods.METHOD_SPECS``,
which the train stage consults; see docs/adding-a-method.md."""
