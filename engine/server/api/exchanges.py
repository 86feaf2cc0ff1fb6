"""What each generating API (Chat Completions, Completions, Messages, Responses) adds to the one
path its route takes (``engine/server/routes_v1.py``): its request body, its prompt and sampling,
and the shape of its answer, streamed or whole."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

from fastapi.responses import JSONResponse

from engine.clients.protocol import EngineClient
from engine.server.api import anthropic_messages, completions, openai_chat, responses, structured
from engine.server.conversation import ChoiceResult, Conversation, Message, Usage
from engine.server.generation import ChoiceEvent
from engine.server.protocol.anthropic import MessagesRequest
from engine.server.protocol.openai import ChatCompletionRequest, CompletionRequest
from engine.server.protocol.responses import ResponsesRequest
from engine.server.state import ServerState
from engine.structured.spec import StructuredSpec


class Exchange:
    """One generating request on its way from parse to answer; a subclass per API."""

    request_type: type
    id_prefix: str
    api: ModuleType  # the API's converters (engine/server/api/<api>.py)

    def __init__(self, req: Any, model: str, state: ServerState) -> None:
        self.req, self.model, self.state = req, model, state
        self.conversation: Conversation | None = None  # known once the prompt is made
        self.thinks = False  # whether the model reasons before its answer (known with the prompt)

    def prompt(self, engine: EngineClient) -> tuple[list[int], bool]:
        """The prompt's token ids, and whether tool calls are parsed out of the generated text; by
        default the request's conversation rendered through the chat template."""
        self.conversation, use_tools = self.api.to_conversation(self.req)
        self.thinks = self.state.apply_thinking(self.conversation, *self.api.thinking_request(self.req))
        return self.state.render(self.conversation, "messages"), use_tools

    def constraint(self) -> StructuredSpec | None:
        """What the output must match: a forced tool call wins over the API's output format, which
        wins over strict tools' argument schemas."""
        spec = self.api.output_spec(self.req)
        conversation = self.conversation
        if conversation is not None and conversation.tools:
            forced = conversation.tool_choice in ("required", "named")
            if spec is None or forced:
                spec = structured.for_tools(conversation, self.state.tool_call_format) or spec
        return spec

    def sampling(self, prompt_len: int, max_model_len: int) -> list[Any]:
        return self.api.sampling(self.req, prompt_len, max_model_len)

    def thinking_budget(self) -> tuple[int | None, str]:
        """The reasoning tokens the request allows (None: unbounded), and the field that says so."""
        return None, ""

    @property
    def n(self) -> int:
        return 1

    @property
    def cache_salt(self) -> str | None:
        return None

    def stream(self, events: AsyncIterator[ChoiceEvent]) -> AsyncIterator[str]:
        raise NotImplementedError

    def respond(self, choices: list[ChoiceResult], usage: Usage) -> Any:
        raise NotImplementedError


class OpenAIExchange(Exchange):
    """Chat Completions and Completions: ``n`` choices, a cache salt, the same answer builders."""

    @property
    def n(self) -> int:
        return self.req.n

    @property
    def cache_salt(self) -> str | None:
        return self.req.cache_salt

    def stream(self, events: AsyncIterator[ChoiceEvent]) -> AsyncIterator[str]:
        return self.api.stream_response(self.req, self.model, events, self.state.token_text)

    def respond(self, choices: list[ChoiceResult], usage: Usage) -> Any:
        return self.api.build_response(self.req, self.model, choices, usage, self.state.token_text)


class ChatExchange(OpenAIExchange):
    request_type, id_prefix, api = ChatCompletionRequest, "chat-", openai_chat

    def thinking_budget(self) -> tuple[int | None, str]:
        return self.req.thinking_token_budget, "thinking_token_budget"  # vLLM's field


class CompletionExchange(OpenAIExchange):
    request_type, id_prefix, api = CompletionRequest, "cmpl-", completions

    def prompt(self, engine: EngineClient) -> tuple[list[int], bool]:
        return completions.prompt_ids(self.req, engine.tokenizer), False


class MessageExchange(Exchange):
    request_type, id_prefix, api = MessagesRequest, "msg-", anthropic_messages

    def thinking_budget(self) -> tuple[int | None, str]:
        return anthropic_messages.thinking_budget(self.req), "thinking.budget_tokens"

    def stream(self, events: AsyncIterator[ChoiceEvent]) -> AsyncIterator[str]:
        return anthropic_messages.stream_response(self.model, events)

    def respond(self, choices: list[ChoiceResult], usage: Usage) -> Any:
        return anthropic_messages.build_response(self.model, choices[0], usage)


class ResponseExchange(Exchange):
    """The Responses API: continues a stored response's history and stores its own."""

    request_type, id_prefix, api = ResponsesRequest, "resp-", responses

    def __init__(self, req: ResponsesRequest, model: str, state: ServerState) -> None:
        super().__init__(req, model, state)
        self.builder = responses.ResponseBuilder(req, model)
        self.history: list[Message] = []  # the earlier turns, known once the prompt is made

    def prompt(self, engine: EngineClient) -> tuple[list[int], bool]:
        self.conversation, self.history, use_tools = responses.to_conversation(self.req, self.state.responses)
        self.thinks = self.state.apply_thinking(self.conversation, *responses.thinking_request(self.req))
        return self.state.render(self.conversation, "input"), use_tools

    def stream(self, events: AsyncIterator[ChoiceEvent]) -> AsyncIterator[str]:
        return self.builder.stream(events, self.state.responses, self.history)

    def respond(self, choices: list[ChoiceResult], usage: Usage) -> Any:
        body = self.builder.final(choices[0], usage)
        self.builder.remember(self.state.responses, self.history, choices[0], body)
        return JSONResponse(body)
