"""The engine core in its own OS process, as ``chassis serve`` runs it.

The server process keeps the HTTP front end (parsing, chat templates, tokenizing, streaming); a
child process it starts runs ``EngineCore`` (scheduler, KV manager, model runner, sampling,
detokenizing and stop strings) and, under tensor parallelism, is rank 0 and starts ranks 1..k-1.
The two never compete for one GIL. ``client`` is the front end's side, ``core_main`` and
``core_loop`` the child's, ``messages`` what crosses between them.
"""

from engine.core_process.client import EngineCoreClient

__all__ = ["EngineCoreClient"]
