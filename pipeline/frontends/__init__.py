"""The front ends (DESIGN.md's layer 5, its API half): :class:`~pipeline.Pipeline` (``pipeline``)
and its options (``options``), ``run()``'s joined outputs (``gather``), one run at a time
(``lifecycle``), batches pushed from other threads (``feed``), one batch at a time from any
thread (``submit``; its futures born done, ``done_future``), several devices (``multi``).
What users import is re-exported by ``pipeline`` itself."""
