"""The grammar engines behind one protocol (``base``), the routing policy between
them (``routing``) and the engine that applies it (``routed``)."""
