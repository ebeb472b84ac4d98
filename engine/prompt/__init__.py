"""Messages in, prompt tokens out: a message as ordered parts (messages.py), the model's own chat
template rendered in a sandbox (chat_template.py), and the prompt built and fitted into the context
(builder.py)."""
