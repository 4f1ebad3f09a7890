#!/usr/bin/env python3
"""Writes data/sample_stories.txt: ~300 KB of simple English prose generated from a small grammar with a fixed
seed (written for this project, no third-party text, so it is free of any copyright). It has enough structure
(recurring names, places, sentence patterns, spelling) that a byte-level GPT-2 trained on it for a few hundred
steps shows a clearly falling loss."""
import random
import sys

random.seed(20240520)
NAMES = ["Anna", "Ben", "Clara", "David", "Ella", "Finn", "Grace", "Henry", "Iris", "Jack", "Lena", "Max",
         "Nora", "Oscar", "Paula", "Sam", "Tara", "Victor"]
ANIMALS = ["cat", "dog", "fox", "owl", "rabbit", "horse", "duck", "mouse", "bear", "goat"]
PLACES = ["the old mill", "the river", "the market", "the forest", "the hill", "the garden", "the harbour",
          "the school", "the bakery", "the library", "the station", "the farm"]
THINGS = ["a red kite", "a small boat", "a loaf of bread", "a blue hat", "a wooden box", "an old map",
          "a silver key", "a basket of apples", "a letter", "a lantern", "a warm blanket", "a book of songs"]
WEATHER = ["The sun was bright", "It was raining softly", "A cold wind blew", "The sky was grey",
           "Snow covered the roofs", "The morning was calm and clear"]
FEELINGS = ["happy", "tired", "curious", "worried", "proud", "surprised", "hungry", "brave"]
VERBS = ["found", "carried", "lost", "painted", "opened", "shared", "mended", "hid"]
ENDINGS = ["and everyone laughed.", "and that was the end of the day.", "and they walked home together.",
           "and nobody ever forgot it.", "and the town was quiet again.", "and they promised to come back."]


def sentence(hero, friend, animal):
    kind = random.randrange(9)
    place, thing = random.choice(PLACES), random.choice(THINGS)
    if kind == 0:
        return f"{random.choice(WEATHER)} when {hero} went to {place}."
    if kind == 1:
        return f"{hero} {random.choice(VERBS)} {thing} near {place}."
    if kind == 2:
        return f"\"Look at this!\" said {hero} to {friend}. \"I {random.choice(VERBS)} {thing}.\""
    if kind == 3:
        return f"The {animal} followed {hero} all the way to {place}."
    if kind == 4:
        return f"{friend} felt {random.choice(FEELINGS)}, so {friend} asked {hero} for help."
    if kind == 5:
        n = random.randint(2, 9)
        return f"They counted {n} birds on the roof of {place}, then {n + 1}, then {n + 2}."
    if kind == 6:
        return f"\"Where are you going?\" asked the {animal}. \"To {place},\" said {hero}."
    if kind == 7:
        return f"At {place} they met a {random.choice(ANIMALS)} who was looking for {thing}."
    return f"{hero} and {friend} sat down by {place} and ate {random.choice(THINGS[2:3] + ['some soup', 'two pears'])}."


def story(i):
    hero, friend = random.sample(NAMES, 2)
    animal = random.choice(ANIMALS)
    lines = [f"Story {i}: {hero} and the {animal}", ""]
    body = [f"Once upon a time there was a child called {hero} who lived near {random.choice(PLACES)}."]
    body += [sentence(hero, friend, animal) for _ in range(random.randint(6, 12))]
    body.append(f"In the end {hero} gave {random.choice(THINGS)} to {friend}, {random.choice(ENDINGS)}")
    lines.append(" ".join(body))
    lines.append("")
    return "\n".join(lines)


def main(path, target_bytes=300_000):
    out, i = [], 1
    while sum(len(s) + 1 for s in out) < target_bytes:
        out.append(story(i))
        i += 1
    with open(path, "w", encoding="ascii") as f:
        f.write("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "data/sample_stories.txt")
