"""Meta-World's 50 tasks as a tenant sees them: an English instruction per task (the goal's
position is not in the default state, so the instruction and the image are what tell a policy
what to do), and the sets people train on (MT10, and pairs of tasks that share a scene and
differ only by what is asked)."""
from __future__ import annotations

INSTRUCTIONS = {
    "assembly-v3": "put the ring on the peg",
    "basketball-v3": "dunk the ball into the basket",
    "bin-picking-v3": "move the cube from the left bin into the right bin",
    "box-close-v3": "put the lid on the box",
    "button-press-topdown-v3": "press the button from the top",
    "button-press-topdown-wall-v3": "press the button behind the wall from the top",
    "button-press-v3": "press the button from the front",
    "button-press-wall-v3": "press the button behind the wall from the front",
    "coffee-button-v3": "press the button on the coffee machine",
    "coffee-pull-v3": "pull the mug away from the coffee machine",
    "coffee-push-v3": "push the mug under the coffee machine",
    "dial-turn-v3": "turn the dial",
    "disassemble-v3": "pick the ring off the peg",
    "door-close-v3": "close the door",
    "door-lock-v3": "lock the door by turning the lock down",
    "door-open-v3": "open the door",
    "door-unlock-v3": "unlock the door by turning the lock up",
    "hand-insert-v3": "put the hand into the hole",
    "drawer-close-v3": "close the drawer",
    "drawer-open-v3": "open the drawer",
    "faucet-open-v3": "turn the faucet counter-clockwise to open it",
    "faucet-close-v3": "turn the faucet clockwise to close it",
    "hammer-v3": "hammer the nail into the wall",
    "handle-press-side-v3": "press the handle down from the side",
    "handle-press-v3": "press the handle down",
    "handle-pull-side-v3": "pull the handle up from the side",
    "handle-pull-v3": "pull the handle up",
    "lever-pull-v3": "pull the lever up",
    "pick-place-wall-v3": "pick up the puck and place it at the goal behind the wall",
    "pick-out-of-hole-v3": "pick the peg out of the hole",
    "pick-place-v3": "pick up the puck and place it at the goal",
    "plate-slide-v3": "slide the plate into the goal",
    "plate-slide-side-v3": "slide the plate sideways into the goal",
    "plate-slide-back-v3": "slide the plate back out of the goal",
    "plate-slide-back-side-v3": "slide the plate sideways back out of the goal",
    "peg-insert-side-v3": "insert the peg into the hole from the side",
    "peg-unplug-side-v3": "unplug the peg sideways",
    "soccer-v3": "kick the ball into the goal",
    "stick-push-v3": "grab the stick and push the box with it",
    "stick-pull-v3": "grab the stick and pull the box with it",
    "push-v3": "push the puck to the goal",
    "push-wall-v3": "push the puck around the wall to the goal",
    "push-back-v3": "pull the puck back to the goal",
    "reach-v3": "reach the red goal with the gripper",
    "reach-wall-v3": "reach over the wall to the red goal",
    "shelf-place-v3": "place the puck on the shelf",
    "sweep-into-v3": "sweep the puck into the hole",
    "sweep-v3": "sweep the puck off the table",
    "window-open-v3": "slide the window open",
    "window-close-v3": "slide the window closed",
}

# MT10 (Meta-World's ten-task multi-task benchmark).
MT10 = ["reach-v3", "push-v3", "pick-place-v3", "door-open-v3", "drawer-open-v3", "drawer-close-v3",
        "button-press-topdown-v3", "peg-insert-side-v3", "window-open-v3", "window-close-v3"]

# Pairs that share a scene's objects and differ by what is asked. Their start states differ (the
# drawer starts closed to be opened, open to be closed), so the image can tell some apart too;
# the instruction is what names the task.
SAME_SCENE = [("drawer-open-v3", "drawer-close-v3"), ("window-open-v3", "window-close-v3"),
              ("faucet-open-v3", "faucet-close-v3")]


def canonical(task: str) -> str:
    """The Meta-World name of `task` ("reach" and "reach-v3" are the same task); KeyError
    naming the known tasks otherwise."""
    name = task if task.endswith("-v3") else task + "-v3"
    if name not in INSTRUCTIONS:
        raise KeyError(f"no Meta-World task '{task}' (known: {', '.join(sorted(INSTRUCTIONS))})")
    return name
