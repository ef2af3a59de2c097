"""The front ends (docs/how-it-works.md's layer 4, the front ends): :class:`~pipeline.Pipeline` (``pipeline``)
and its options (``options``), ``run()``'s joined outputs (``gather``), one run at a time
(``lifecycle``), batches pushed from other threads (``feed``), one batch at a time from any
thread (``submit``; its futures born done, ``done_future``), several devices (``multi``).
What users import is re-exported by ``pipeline`` itself."""
