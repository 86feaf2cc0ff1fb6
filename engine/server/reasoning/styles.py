"""Which reasoning format a checkpoint uses, and its chat template's thinking switch, if any."""

from __future__ import annotations

from dataclasses import dataclass

from engine.server.reasoning.parser import END, START


@dataclass(frozen=True)
class ReasoningStyle:
    name: str  # "qwen3" | "deepseek_v3" | "deepseek_r1"
    # The chat template variable that turns thinking on or off; None: the model always thinks.
    switch: str | None
    end_marker: str = END

    def thinking_on(self, template_kwargs: dict) -> bool:
        """Whether a request rendered with these template variables thinks (the template's default
        when unset: Qwen3 thinks unless told not to, DeepSeek-V3.1 only when told to)."""
        if self.switch is None:
            return True
        value = template_kwargs.get(self.switch)
        if value is None:
            return self.name == "qwen3"
        return bool(value)


def detect_style(chat_template: str | None) -> ReasoningStyle | None:
    """From the chat template: Qwen3's ``enable_thinking``, DeepSeek-V3.1's ``thinking``, or an
    R1-style template that always opens ``<think>``; None for a model that does not reason."""
    template = chat_template or ""
    if START not in template and END not in template:
        return None
    if "enable_thinking" in template:
        return ReasoningStyle("qwen3", "enable_thinking")
    if "thinking" in template.replace(START, "").replace(END, ""):
        return ReasoningStyle("deepseek_v3", "thinking")
    return ReasoningStyle("deepseek_r1", None)
