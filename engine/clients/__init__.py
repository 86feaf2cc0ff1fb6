"""What serves requests from an engine core: the ``EngineClient`` Protocol (``protocol``), its
implementations (``in_thread``, ``subprocess_client``, ``inline`` behind the offline ``llm.LLM``) and
the one admission path they share (``admission``)."""
