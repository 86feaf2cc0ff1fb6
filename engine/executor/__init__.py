"""engine/executor: what runs the model for ``EngineCore``.

``protocol.Executor`` is the seam; ``factory.make_executor`` picks ``single_device`` or
``tensor_parallel`` (rank 0 here; ``tp_worker`` is every other rank, ``tp_messages`` what they are
sent). ``supervision`` is the one place child processes are watched, described and stopped at exit.
Kept free of imports, so importing ``supervision`` (the subprocess client does) loads nothing else.
"""
