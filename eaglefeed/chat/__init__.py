"""Chat prompts as the target model sees them: rows, the chat-template renderer, the conversation library.

Shared by the producer (turn 0) and the converse stage (turn k), so both render with the same code.
"""
