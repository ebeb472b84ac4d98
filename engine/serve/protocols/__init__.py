"""The wire formats the server speaks, each read into Hearth's requests and written back: OpenAI's
chat and completions (openai.py, openai_tools.py), Responses (responses.py, responses_input.py) and
Anthropic's Messages (anthropic.py, anthropic_blocks.py); wire.py is what the shared route needs of one."""
