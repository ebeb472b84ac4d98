"""The local server's HTTP side: the routes (server.py), reading bodies and answering failures
(body.py), who may talk to it (security.py), and a ticket's events handed to the event loop (pump.py)."""
