"""What every layer uses and none owns: errors (``errors``), capabilities as protocols
(``capabilities``), closing in three layers (``closing``), ONNX Runtime's import and its
build's checks (``ort``), numpy views of Arrow numbers (``arrow``), first rows and rows
after (``rows``), names imported on first use (``lazy``), the CPUs this process may use
(``cpus``)."""
