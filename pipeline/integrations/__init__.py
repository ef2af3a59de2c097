"""What the scale-out integrations share: a batch of rows as a pyarrow table in, the model's
inputs, a table of results out (``columnar``).  The integrations themselves keep their
documented import paths, ``pipeline.ray`` and ``pipeline.spark``."""
