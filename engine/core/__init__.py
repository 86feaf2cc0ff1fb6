"""The engine core: ``EngineCore`` (admit, step, outputs), ``drive_loop`` (the one loop that drives a
core), prompt validation, warm-up, and the engine-core process that ``chassis serve`` starts
(``process_main``, ``process_loop``, ``messages``)."""
