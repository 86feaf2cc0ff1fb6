"""A value derived from a step's tensors is made once per step (kernels/step_memo.py) and made again
for another tensor, a tensor written in place, or another argument."""

import torch

from kernels.step_memo import StepMemo


def test_made_once_per_step_and_again_when_anything_differs():
    made = []
    memo = StepMemo(lambda t, scale: made.append(1) or t * scale, tensors=1)
    positions = torch.arange(4)
    first = memo(positions, 2)
    assert memo(positions, 2) is first and len(made) == 1  # the other layers of the step
    assert torch.equal(memo(positions, 3), positions * 3) and len(made) == 2
    positions.add_(1)  # a static buffer rewritten for the next step
    assert torch.equal(memo(positions, 3), positions * 3) and len(made) == 3
    other = positions.clone()  # equal values, another tensor
    memo(other, 3)
    assert len(made) == 4
    memo.clear()
    memo(other, 3)
    assert len(made) == 5
