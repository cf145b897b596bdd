"""What the mixed load (`bench --load --corpus NAME`) stores and searches for.

- `synthetic` (the default): the latency bench's facts ("Alice booked the window seat in Oslo
  on Monday (note 12).") and questions about a name and a thing in a place on a day; each word
  of a question matches a tenth to a twenty-fifth of the memories.
- `small-vocabulary`: short texts of 5 to 12 words drawn from 300 common words by a Zipf law
  (the k-th word k times rarer than the first), and questions of 3 to 6 words drawn the same way,
  so most questions hold a word that most memories hold: the shape of chat memories ("user
  likes coffee in the morning"), where the keyword branch of a hybrid search has many matching
  rows to read and rank.

Both are deterministic for a seed.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass

from bench import latency

# 300 words, none an English stop word (each is a lexeme of `to_tsvector('english', …)`), the
# most frequent first.
_WORDS = """
user likes coffee morning work team meeting project prefers time home family weekend email call
phone week day plan trip travel music food dinner lunch tea book read movie watch game play
friend wife husband son daughter mother father dog cat car house city office job manager report
client customer order shipping price budget money bank card account password support issue bug
fix release deploy server database code review test design feature product launch deadline
schedule calendar reminder note list task goal habit health doctor appointment gym run walk
bike swim yoga sleep diet vegan vegetarian allergy gluten dairy nuts spicy sweet breakfast
pizza pasta sushi salad soup bread cheese wine beer juice water chocolate cake birthday
anniversary holiday vacation beach mountain hiking camping flight hotel train bus airport
passport visa luggage seat window aisle upgrade refund cancel booking reservation restaurant
table menu tip bill invoice payment subscription renewal discount coupon newsletter
notification settings dark mode language english spanish french german japanese lesson class
course school university degree exam study learn teach student teacher homework garden plant
flower tree rain snow sun weather summer winter spring autumn cold warm hot jacket shoes shirt
dress size color blue red green black white gray store shop mall online delivery package
address street apartment room kitchen bathroom bedroom sofa desk chair lamp laptop tablet
screen keyboard mouse printer camera headphones charger battery cable wifi internet app website
browser update version backup cloud storage photo video song album concert ticket theater
museum gallery art painting drawing writing blog podcast news article magazine paper letter
gift present party wedding guest invitation baby kid toy pickup carpool neighbor colleague boss
interview salary promotion contract remote hybrid commute parking traffic fuel electric
charging insurance tax rent mortgage loan savings investment stock crypto retirement pension
charity donation volunteer
"""
WORDS = _WORDS.split()
# P(k-th word) ∝ 1 / k: cumulative weights for random.choices.
_ZIPF = list(itertools.accumulate(1.0 / rank for rank in range(1, len(WORDS) + 1)))


def _words(rng: random.Random, low: int, high: int) -> list[str]:
    return rng.choices(WORDS, cum_weights=_ZIPF, k=rng.randint(low, high))


def small_fact(rng: random.Random, i: int) -> str:
    words = _words(rng, 5, 12)
    return " ".join([words[0].capitalize(), *words[1:]]) + "."


def small_query(rng: random.Random) -> str:
    return " ".join(_words(rng, 3, 6))


def synthetic_query(rng: random.Random) -> str:
    """A search as an agent would phrase it (35,000 combinations: few repeat in a run)."""
    return (
        f"{latency.query_text(rng)} in {rng.choice(latency.PLACES)} on {rng.choice(latency.DAYS)}"
    )


@dataclass(frozen=True)
class Corpus:
    name: str
    fact: Callable[[random.Random, int], str]  # (rng, index) -> a memory's text
    query: Callable[[random.Random], str]


CORPORA = {
    "synthetic": Corpus("synthetic", latency.fact, synthetic_query),
    "small-vocabulary": Corpus("small-vocabulary", small_fact, small_query),
}
