"""The phrasings of the calculator env's word problems (`families.word_problems` and
`families.program`): six kinds of computation, eight phrasings each (every fourth held out),
and for the program family a name for each number of each phrasing."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Template:
    """One phrasing: `kind` (the template group), `text` (a format string over the kind's
    fields) and, for calculator tasks, `expression` (the call, in the words' order)."""

    kind: str
    text: str
    expression: str = ""


# fmt: off
WORD = (
    Template("mul_add", "{name} has {a} boxes with {b} {item} in each box and {c} more {item}. How many {item} does {name} have?", "{a} * {b} + {c}"),  # noqa: E501
    Template("mul_add", "A hall has {a} rows of {b} chairs and {c} extra chairs by the wall. How many chairs are in the hall?", "{a} * {b} + {c}"),  # noqa: E501
    Template("mul_add", "{name} reads {b} pages a day for {a} days, then {c} more pages on the weekend. How many pages does {name} read in all?", "{b} * {a} + {c}"),  # noqa: E501
    Template("mul_add", "There are {c} {item} on a shelf. {name} adds {a} bags of {b} {item} each. How many {item} are on the shelf now?", "{c} + {a} * {b}"),  # noqa: E501
    Template("mul_sub", "{name} has {a} boxes with {b} {item} in each box and gives away {c} {item}. How many {item} are left?", "{a} * {b} - {c}"),  # noqa: E501
    Template("mul_sub", "A baker makes {a} trays of {b} rolls and sells {c} rolls. How many rolls are left?", "{a} * {b} - {c}"),  # noqa: E501
    Template("mul_sub", "A printer prints {b} pages a minute for {a} minutes, and {c} of the pages jam. How many good pages are there?", "{b} * {a} - {c}"),  # noqa: E501
    Template("mul_sub", "{name} saves {b} coins every week for {a} weeks, then spends {c} coins. How many coins does {name} have left?", "{b} * {a} - {c}"),  # noqa: E501
    Template("add_mul", "{name} buys {a} red packs and {b} blue packs, each with {c} {item}. How many {item} does {name} buy?", "({a} + {b}) * {c}"),  # noqa: E501
    Template("add_mul", "A school has {a} boys and {b} girls. Each child gets {c} pencils. How many pencils are handed out?", "({a} + {b}) * {c}"),  # noqa: E501
    Template("add_mul", "A bus makes {a} trips in the morning and {b} trips in the evening, with {c} people on each trip. How many people does it carry?", "({a} + {b}) * {c}"),  # noqa: E501
    Template("add_mul", "Each of {c} tables gets {a} forks and {b} spoons. How many pieces of cutlery are on the tables?", "{c} * ({a} + {b})"),  # noqa: E501
    Template("share", "{name} shares {t} {item} equally among {b} friends. How many {item} does each friend get?", "{t} / {b}"),  # noqa: E501
    Template("share", "A farmer packs {t} eggs into cartons of {b}. How many cartons does the farmer fill?", "{t} / {b}"),  # noqa: E501
    Template("share", "A rope {t} meters long is cut into {b} equal pieces. How many meters long is each piece?", "{t} / {b}"),  # noqa: E501
    Template("share", "{t} {item} are split evenly into {b} bags. How many {item} go in each bag?", "{t} / {b}"),  # noqa: E501
    Template("sub_sub", "{name} has {a} {item}, gives {b} to a friend and loses {c}. How many {item} does {name} have now?", "{a} - {b} - {c}"),  # noqa: E501
    Template("sub_sub", "A tank holds {a} liters. {b} liters leak out and {c} liters are used. How many liters are left?", "{a} - {b} - {c}"),  # noqa: E501
    Template("sub_sub", "A library has {a} books. {b} are lent out on Monday and {c} on Tuesday. How many books are still on the shelves?", "{a} - {b} - {c}"),  # noqa: E501
    Template("sub_sub", "After spending {b} dollars on food and {c} dollars on a ticket, how many of {name}'s {a} dollars remain?", "{a} - {b} - {c}"),  # noqa: E501
    Template("add_add", "{name} walks {a} steps in the morning, {b} at noon and {c} in the evening. How many steps does {name} walk?", "{a} + {b} + {c}"),  # noqa: E501
    Template("add_add", "A shop sells {a} {item} on Monday, {b} on Tuesday and {c} on Wednesday. How many {item} does it sell?", "{a} + {b} + {c}"),  # noqa: E501
    Template("add_add", "A train has {a} passengers in the first car, {b} in the second and {c} in the third. How many passengers are on the train?", "{a} + {b} + {c}"),  # noqa: E501
    Template("add_add", "{name} collected {a} {item}, then found {b} more and got {c} as a gift. How many {item} does {name} have?", "{a} + {b} + {c}"),  # noqa: E501
    # The second four of each kind (2026-12-07): phrasings with the structures of the held-out
    # ones (the addend before the product, the shared factor first, the total named last), so a
    # held-out phrasing is new words over a structure training shows (but `share/7`, whose
    # divisor comes first);
    # the fourth of these is held out too (a quarter of each kind, as before).
    Template("mul_add", "A jar holds {c} marbles. {name} pours in {a} cups with {b} marbles in each cup. How many marbles are in the jar now?", "{c} + {a} * {b}"),  # noqa: E501
    Template("mul_add", "{name} packs {a} crates of {b} {item} each and has {c} loose {item}. How many {item} are there in all?", "{a} * {b} + {c}"),  # noqa: E501
    Template("mul_add", "A garden starts with {c} plants. The gardener plants {a} rows of {b} more. How many plants are in the garden?", "{c} + {a} * {b}"),  # noqa: E501
    Template("mul_add", "A parking garage has {a} levels with {b} cars on each level and {c} cars outside. How many cars are there?", "{a} * {b} + {c}"),  # noqa: E501
    Template("mul_sub", "{name} bakes {a} batches of {b} cookies and eats {c} of them. How many cookies are left?", "{a} * {b} - {c}"),  # noqa: E501
    Template("mul_sub", "A worker earns {b} dollars an hour for {a} hours and pays {c} dollars for lunch. How many dollars does the worker keep?", "{b} * {a} - {c}"),  # noqa: E501
    Template("mul_sub", "{c} of the {item} break when {name} carries {a} boxes of {b} {item}. How many {item} are not broken?", "{a} * {b} - {c}"),  # noqa: E501
    Template("mul_sub", "A factory fills {a} crates with {b} bottles each and ships {c} bottles. How many bottles stay at the factory?", "{a} * {b} - {c}"),  # noqa: E501
    Template("add_mul", "For {c} days, {name} drinks {a} cups of tea and {b} cups of water each day. How many cups does {name} drink?", "{c} * ({a} + {b})"),  # noqa: E501
    Template("add_mul", "A store gets {a} small boxes and {b} large boxes, each holding {c} {item}. How many {item} does the store get?", "({a} + {b}) * {c}"),  # noqa: E501
    Template("add_mul", "There are {c} vans, and each van carries {a} adults and {b} children. How many people ride in the vans?", "{c} * ({a} + {b})"),  # noqa: E501
    Template("add_mul", "{name} sells {a} cakes on Saturday and {b} cakes on Sunday, at {c} dollars a cake. How many dollars does {name} make?", "({a} + {b}) * {c}"),  # noqa: E501
    Template("share", "{t} students are put into {b} equal teams. How many students are on each team?", "{t} / {b}"),  # noqa: E501
    Template("share", "{name} drives {t} kilometers in {b} hours at a steady speed. How many kilometers does {name} drive each hour?", "{t} / {b}"),  # noqa: E501
    Template("share", "A box of {t} {item} is divided equally among {b} children. How many {item} does each child get?", "{t} / {b}"),  # noqa: E501
    Template("share", "{b} friends split a bill of {t} dollars equally. How many dollars does each friend pay?", "{t} / {b}"),  # noqa: E501
    Template("sub_sub", "After {b} people leave at noon and {c} leave at night, how many of the {a} guests are still at the party?", "{a} - {b} - {c}"),  # noqa: E501
    Template("sub_sub", "A field has {a} sheep. {b} are sold and {c} are moved to another farm. How many sheep stay in the field?", "{a} - {b} - {c}"),  # noqa: E501
    Template("sub_sub", "{name} had {a} {item}, used {b} for a project and sold {c}. How many {item} are left?", "{a} - {b} - {c}"),  # noqa: E501
    Template("sub_sub", "A road is {a} meters long. Workers paint {b} meters on Monday and {c} meters on Tuesday. How many meters are left to paint?", "{a} - {b} - {c}"),  # noqa: E501
    Template("add_add", "A farm has {a} chickens, {b} ducks and {c} geese. How many birds does the farm have?", "{a} + {b} + {c}"),  # noqa: E501
    Template("add_add", "{name} scores {a} points in the first game, {b} in the second and {c} in the third. How many points does {name} score in all?", "{a} + {b} + {c}"),  # noqa: E501
    Template("add_add", "To the {a} {item} in a drawer, {name} adds {b} and then {c} more. How many {item} are in the drawer?", "{a} + {b} + {c}"),  # noqa: E501
    Template("add_add", "A zoo has {a} visitors on Friday, {b} on Saturday and {c} on Sunday. How many visitors come over the three days?", "{a} + {b} + {c}"),  # noqa: E501
)
# fmt: on

# The word problems' templates, each with a name for each of its numbers (in `WORD`'s order):
# a program names the numbers in the order the words give them, then prints the computation.
# fmt: off
PROGRAM_NAMES = (
    {"a": "boxes", "b": "per_box", "c": "more"},
    {"a": "rows", "b": "per_row", "c": "extra"},
    {"b": "per_day", "a": "days", "c": "weekend"},
    {"c": "on_shelf", "a": "bags", "b": "per_bag"},
    {"a": "boxes", "b": "per_box", "c": "given"},
    {"a": "trays", "b": "per_tray", "c": "sold"},
    {"b": "per_minute", "a": "minutes", "c": "jammed"},
    {"b": "per_week", "a": "weeks", "c": "spent"},
    {"a": "red", "b": "blue", "c": "per_pack"},
    {"a": "boys", "b": "girls", "c": "per_child"},
    {"a": "morning", "b": "evening", "c": "per_trip"},
    {"c": "tables", "a": "forks", "b": "spoons"},
    {"t": "total", "b": "friends"},
    {"t": "eggs", "b": "per_carton"},
    {"t": "length", "b": "pieces"},
    {"t": "total", "b": "bags"},
    {"a": "start", "b": "given", "c": "lost"},
    {"a": "liters", "b": "leaked", "c": "used"},
    {"a": "books", "b": "monday", "c": "tuesday"},
    {"b": "food", "c": "ticket", "a": "dollars"},
    {"a": "morning", "b": "noon", "c": "evening"},
    {"a": "monday", "b": "tuesday", "c": "wednesday"},
    {"a": "first", "b": "second", "c": "third"},
    {"a": "collected", "b": "found", "c": "gift"},
    {"c": "in_jar", "a": "cups", "b": "per_cup"},
    {"a": "crates", "b": "per_crate", "c": "loose"},
    {"c": "plants", "a": "rows", "b": "per_row"},
    {"a": "levels", "b": "per_level", "c": "outside"},
    {"a": "batches", "b": "per_batch", "c": "eaten"},
    {"b": "per_hour", "a": "hours", "c": "lunch"},
    {"c": "broken", "a": "boxes", "b": "per_box"},
    {"a": "crates", "b": "per_crate", "c": "shipped"},
    {"c": "days", "a": "tea", "b": "water"},
    {"a": "small", "b": "large", "c": "per_box"},
    {"c": "vans", "a": "adults", "b": "children"},
    {"a": "saturday", "b": "sunday", "c": "price"},
    {"t": "students", "b": "teams"},
    {"t": "kilometers", "b": "hours"},
    {"t": "total", "b": "children"},
    {"b": "friends", "t": "bill"},
    {"b": "left_noon", "c": "left_night", "a": "guests"},
    {"a": "sheep", "b": "sold", "c": "moved"},
    {"a": "had", "b": "used", "c": "sold"},
    {"a": "meters", "b": "monday", "c": "tuesday"},
    {"a": "chickens", "b": "ducks", "c": "geese"},
    {"a": "first", "b": "second", "c": "third"},
    {"a": "drawer", "b": "added", "c": "more"},
    {"a": "friday", "b": "saturday", "c": "sunday"},
)
# fmt: on
