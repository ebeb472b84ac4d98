"""Small Qt pieces every part of the window shares: the shortcut table, themes, the info
bar, inert links and the event-loop monitor.
"""
