"""The engine core: one thread and one step loop for every request, the window's, the API's, agents' and
other devices'. job (what a caller submits, the handle it reads), loop (the thread, the queue, admission),
step (one batch over every sequence), schedule (the step's rules: priorities, aging, the window's share),
run (a request and its pipeline), reply (the pipeline every reply runs), lease (a request's sequence)."""
