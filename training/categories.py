"""The eight question categories the paper trains and tests on, and its reported numbers.

Dataset files name categories in their own ways ("object_rel_direction_hard",
"Landmark Position", ...). `canonical_category` maps every spelling we know to one of
`CATEGORIES`, merging the three relative-direction levels into one, and returns None for
categories the paper does not use (they are dropped and counted by the data step).
"""

from __future__ import annotations

import re

# Canonical names, in the column order of the paper's results table (docs/method.md §7).
CATEGORIES: tuple[str, ...] = (
    "landmark_position",
    "counterfactual",
    "progress_evaluation",
    "action_generation",
    "object_rel_distance",
    "object_rel_direction",
    "route_planning",
    "obj_appearance_order",
)

# Short column titles used in the markdown tables.
CATEGORY_TITLES: dict[str, str] = {
    "landmark_position": "landmark pos.",
    "counterfactual": "counterfactual",
    "progress_evaluation": "progress eval.",
    "action_generation": "action gen.",
    "object_rel_distance": "rel. distance",
    "object_rel_direction": "rel. direction",
    "route_planning": "route plan",
    "obj_appearance_order": "appearance order",
}

# Which benchmark each category comes from.
CATEGORY_SOURCE: dict[str, str] = {
    "landmark_position": "urbanvideo",
    "counterfactual": "urbanvideo",
    "progress_evaluation": "urbanvideo",
    "action_generation": "urbanvideo",
    "object_rel_distance": "vsi",
    "object_rel_direction": "vsi",
    "route_planning": "vsi",
    "obj_appearance_order": "vsi",
}

# VSI-Bench's own question types (its evaluation scores each one separately).
VSI_DIRECTION_LEVELS: tuple[str, ...] = (
    "object_rel_direction_easy",
    "object_rel_direction_medium",
    "object_rel_direction_hard",
)
VSI_CHOICE_TYPES: tuple[str, ...] = (
    "object_rel_distance",
    *VSI_DIRECTION_LEVELS,
    "route_planning",
    "obj_appearance_order",
)
# Numeric-answer types (options null): scored by mean relative accuracy; not used by the
# paper, so kept only with `prepare --include-numeric`.
VSI_NUMERIC_TYPES: tuple[str, ...] = (
    "object_counting",
    "object_abs_distance",
    "object_size_estimation",
    "room_size_estimation",
)
VSI_TYPE_TITLES: dict[str, str] = {
    "object_counting": "obj. count",
    "object_abs_distance": "abs. dist.",
    "object_size_estimation": "obj. size",
    "room_size_estimation": "room size",
    "object_rel_distance": "rel. dist.",
    "object_rel_direction": "rel. dir.",
    "route_planning": "route plan",
    "obj_appearance_order": "appr. order",
}

_ALIASES: dict[str, str] = {
    # VSI-Bench spellings
    "object_rel_distance": "object_rel_distance",
    "obj_rel_distance": "object_rel_distance",
    "relative_distance": "object_rel_distance",
    "rel_distance": "object_rel_distance",
    "object_rel_direction": "object_rel_direction",
    "object_rel_direction_easy": "object_rel_direction",
    "object_rel_direction_medium": "object_rel_direction",
    "object_rel_direction_hard": "object_rel_direction",
    "obj_rel_direction": "object_rel_direction",
    "relative_direction": "object_rel_direction",
    "rel_direction": "object_rel_direction",
    "route_planning": "route_planning",
    "route_plan": "route_planning",
    "obj_appearance_order": "obj_appearance_order",
    "object_appearance_order": "obj_appearance_order",
    "appearance_order": "obj_appearance_order",
    # UrbanVideo-Bench spellings
    "landmark_position": "landmark_position",
    "counterfactual": "counterfactual",
    "progress_evaluation": "progress_evaluation",
    "action_generation": "action_generation",
}

# Accuracy (%) reported by the paper on its in-distribution test split (docs/method.md §7).
PAPER_RESULTS: dict[str, dict[str, float]] = {
    "Random": dict(avg=24.0, landmark_position=19.7, counterfactual=25.0,
                   progress_evaluation=21.8, action_generation=16.4,
                   object_rel_distance=25.0, object_rel_direction=36.1,
                   route_planning=28.3, obj_appearance_order=25.0),
    "GPT-4o": dict(avg=35.7, landmark_position=36.8, counterfactual=44.7,
                   progress_evaluation=34.2, action_generation=33.8,
                   object_rel_distance=37.0, object_rel_direction=41.3,
                   route_planning=31.5, obj_appearance_order=28.5),
    "Qwen2.5-VL-72B alone": dict(avg=34.9, landmark_position=34.7, counterfactual=34.8,
                                 progress_evaluation=26.4, action_generation=37.7,
                                 object_rel_distance=40.8, object_rel_direction=29.0,
                                 route_planning=32.5, obj_appearance_order=43.9),
    "Embodied-R (paper)": dict(avg=51.1, landmark_position=55.1, counterfactual=59.9,
                               progress_evaluation=39.7, action_generation=47.6,
                               object_rel_distance=50.0, object_rel_direction=44.3,
                               route_planning=36.8, obj_appearance_order=72.0),
}

# Share of logically consistent outputs reported by the paper (judged by GPT-4o), in %.
PAPER_CONSISTENCY = {"without consistency reward": 46.01, "with consistency reward": 99.43}


def normalise_name(name: str) -> str:
    """Lower-case, and turn every run of non-alphanumerics into one underscore."""
    return re.sub(r"[^0-9a-z]+", "_", str(name).strip().lower()).strip("_")


def canonical_category(name: str) -> str | None:
    """The canonical category for a dataset's category name, or None if not used."""
    return _ALIASES.get(normalise_name(name))
