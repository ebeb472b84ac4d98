"""The chat pane: the conversation list, the messages, the input box, Markdown and the welcome.
"""
