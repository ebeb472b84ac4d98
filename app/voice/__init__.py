"""Voice in the window: dictation into the message box and replies read aloud (engine/voice does the work).

Present only where voice is installed (``scripts/setup.py --voice``): without
it the window shows no microphone and no Speak buttons.
- devices.py: the microphone and the speaker (QtMultimedia);
- dictation.py: a recording's chunks transcribed on a worker as the speaker pauses;
- read_aloud.py: a reply's sentences spoken on a worker as they are written;
- voice_controller.py: the buttons, the hold-to-talk key, Settings → Voice applied, hands-free turns.
"""
