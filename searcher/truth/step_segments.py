"""Where a traced step is: the segments a step tracer's peaks are kept by.

A decoder layer is ``first``, ``second``, ``second_to_last``, ``last`` or ``middle``; each phase
(forward, backward, the optimizer step's master cast) keeps one peak per place, so that traces at
two depths can be matched segment by segment and extrapolated (searcher/truth/step_trace.py).
"""

from __future__ import annotations

from typing import Any


def _layer_place(i: int, n: int) -> str:
    """first / second / … / second-to-last / last; a layer may be two (joined by '|')."""
    places = []
    if i == 0:
        places.append("first")
    elif i == n - 1:
        places.append("last")
    else:
        if i == 1:
            places.append("second")
        if i == n - 2:
            places.append("second_to_last")
    return "|".join(places) or "middle"


def _segment(phase: str, place: str) -> str:
    return "|".join(f"{phase}:{p}" for p in place.split("|"))


def _starts_backward(tracker: Any, where: str) -> None:
    tracker.set_segment(_segment("backward", where))


def _hooks(model: Any, tracker: Any) -> None:
    """Phase and segment marks. The head's output starts the loss. A decoder layer is ``first``,
    ``last`` or ``middle`` (segments of identical layers, matched across traced depths); in
    backward, a layer's segment starts when the gradient of its output is ready (a hook on the
    output), or when one of its parameters accumulates a gradient, or when its checkpoint is
    recomputed (a recomputed layer's tensors are ``recomputed``)."""
    from searcher.truth.hf_build import layer_stacks

    head = model.get_output_embeddings()
    head.register_forward_hook(lambda *_: tracker.set_phase("loss", "logits_and_loss"))
    layer_of: dict[int, str] = {}
    for _name, stack in layer_stacks(model):
        n = len(stack)
        for i, layer in enumerate(stack):
            where = _layer_place(i, n)
            for p in layer.parameters():
                layer_of[id(p)] = where

            def pre(*_: Any, where: str = where) -> None:
                if tracker.phase == "backward":
                    tracker.category = "recomputed"
                tracker.set_segment(_segment(tracker.phase, where))

            def post(_m: Any, _args: Any, out: Any, where: str = where) -> None:
                if tracker.phase == "backward":
                    tracker.category = "temporaries"
                    return
                # the layer's backward begins when its output's gradient is ready: its segment
                # starts there, not at its first parameter's accumulation (which, with frozen
                # MLPs, comes after the MLP's backward, then charged to the layer above)
                first = out[0] if isinstance(out, tuple) else out
                if getattr(first, "requires_grad", False):
                    first.register_hook(lambda _g, where=where: _starts_backward(tracker, where))

            layer.register_forward_pre_hook(pre)
            layer.register_forward_hook(post)

    def accumulated(p: Any) -> None:
        tracker.label(p.grad, "gradients")
        where = layer_of.get(id(p))
        if where is not None:
            tracker.set_segment(_segment("backward", where))
        elif tracker.segment != "backward":  # outside the layers, after them: the embedding
            tracker.set_segment("backward:embedding")

    for p in model.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(accumulated)
    tracker.place_of = layer_of  # the master cast's segments (_optimizer_step)
