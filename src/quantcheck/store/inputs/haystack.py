"""Long filler text with one planted sentence, for needle-recall prompts.

A prompt's `haystack: {tokens: 10000, depth: 0.5, needle: "The codeword is ...", seed: 1}`
replaces `{haystack}` in its text with about `tokens` tokens of plain filler (sentences
about an invented town's records, never the answer) and the needle sentence placed at
`depth` (0: the start, 1: the end). `sentences: N` in place of `tokens` asks for exactly
N sentences of filler (what the context ladder writes, after measuring the prompt on the
server's tokenizer); without a needle (or an empty one) nothing is planted: an
absent-needle probe. `language` picks the filler's language: `en` (English, the
default), `de` (German) or `zh` (Chinese); the needle is planted as written. The text is
a pure function of the settings, the same on every machine and Python version (sha256,
no `random`), so the prompt's hash is stable and nothing is downloaded.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

PLACEHOLDER = "{haystack}"
# English filler of this kind runs about 1.3 tokens per word in Llama, Qwen and Gemma
# vocabularies; the word count aims at the requested token count.
TOKENS_PER_WORD = 1.3
SENTENCES_PER_PARAGRAPH = 8


@dataclass(frozen=True)
class Filler:
    """One language's word lists: a sentence is one of each, in `order`, then `stop`.
    `tokens_per_unit` estimates tokens per word (per character where words are not
    spaced, `spaced` False)."""

    subjects: tuple[str, ...]
    verbs: tuple[str, ...]
    objects: tuple[str, ...]
    times: tuple[str, ...]
    order: tuple[int, ...] = (0, 1, 2, 3)  # subject, verb, object, time
    stop: str = "."
    spaced: bool = True
    tokens_per_unit: float = TOKENS_PER_WORD

    def sentence(self, seed: int, number: int, salt: str = "") -> str:
        digest = hashlib.sha256(f"{seed}:{number}{salt}".encode()).digest()
        parts = (self.subjects, self.verbs, self.objects, self.times)
        words = [options[digest[n] % len(options)] for n, options in enumerate(parts)]
        joiner = " " if self.spaced else ""
        return joiner.join(words[n] for n in self.order) + self.stop

    def estimate(self, sentence: str) -> float:
        """About how many tokens `sentence` makes."""
        units = len(sentence.split()) if self.spaced else len(sentence)
        return units * self.tokens_per_unit


ENGLISH = Filler(
    subjects=("The ledger", "The harbour master", "A clerk", "The mill", "The council",
              "The ferry", "An old map", "The bakery", "The school", "A weaver",
              "The lighthouse", "The market", "A carpenter", "The orchard", "The library"),
    verbs=("recorded", "noted", "counted", "described", "listed", "mentioned", "kept",
           "reported", "measured", "mended", "painted", "moved", "sold", "stored", "checked"),
    objects=("the spring tides", "forty barrels of salt", "a broken gate", "the winter wool",
             "seven new lanterns", "the eastern road", "a quiet season", "the river stones",
             "two hundred apples", "the north bridge", "a blue wagon", "the autumn fair",
             "the chapel bells", "a cart of timber", "the last frost"),
    times=("in the third week", "before the harvest", "after the long rain", "on a Tuesday",
           "during the fair", "at first light", "late in the year", "in early summer",
           "when the snow came", "without complaint", "for the second time", "as usual"))
GERMAN = Filler(
    subjects=("Das Register", "Der Hafenmeister", "Ein Schreiber", "Die Mühle", "Der Rat",
              "Die Fähre", "Eine alte Karte", "Die Bäckerei", "Die Schule", "Ein Weber",
              "Der Leuchtturm", "Der Markt", "Ein Zimmermann", "Der Obstgarten",
              "Die Bibliothek"),
    verbs=("verzeichnete", "notierte", "zählte", "beschrieb", "listete", "erwähnte",
           "bewahrte", "meldete", "maß", "reparierte", "strich", "verlegte", "verkaufte",
           "lagerte", "prüfte"),
    objects=("die Springfluten", "vierzig Fässer Salz", "ein kaputtes Tor", "die Winterwolle",
             "sieben neue Laternen", "die östliche Straße", "eine ruhige Saison",
             "die Flusssteine", "zweihundert Äpfel", "die Nordbrücke", "einen blauen Wagen",
             "den Herbstmarkt", "die Kapellenglocken", "eine Ladung Holz", "den letzten Frost"),
    times=("in der dritten Woche", "vor der Ernte", "nach dem langen Regen",
           "an einem Dienstag", "während des Marktes", "im ersten Licht", "spät im Jahr",
           "im Frühsommer", "als der Schnee kam", "ohne Klage", "zum zweiten Mal",
           "wie üblich"),
    tokens_per_unit=1.8)
CHINESE = Filler(
    subjects=("账簿", "港务长", "一位文书", "磨坊", "议会", "渡船", "一张旧地图", "面包房",
              "学校", "一位织工", "灯塔", "集市", "一位木匠", "果园", "图书馆"),
    verbs=("记录了", "注意到了", "清点了", "描述了", "列出了", "提到了", "保管了", "报告了",
           "测量了", "修补了", "粉刷了", "搬走了", "卖掉了", "储存了", "检查了"),
    objects=("春潮", "四十桶盐", "一扇坏门", "冬天的羊毛", "七盏新灯笼", "东边的路",
             "一个安静的季节", "河里的石头", "两百个苹果", "北桥", "一辆蓝色马车", "秋季集市",
             "教堂的钟", "一车木材", "最后一场霜"),
    times=("在第三周", "在收获之前", "在长雨之后", "在一个星期二", "在集市期间", "在黎明时分",
           "在年末", "在初夏", "在下雪的时候", "毫无怨言地", "第二次", "照例"),
    order=(0, 3, 1, 2), stop="。", spaced=False, tokens_per_unit=0.9)
LANGUAGES = {"en": ENGLISH, "de": GERMAN, "zh": CHINESE}


def _salt(language: str) -> str:
    return "" if language == "en" else f":{language}"  # English keeps its earlier texts


def sentences_for(tokens: int, language: str = "en", seed: int = 0) -> int:
    """How many filler sentences make about `tokens` tokens (the estimate `haystack`
    aims with)."""
    filler, count, estimate = LANGUAGES[language], 0, 0.0
    while estimate < tokens:
        estimate += filler.estimate(filler.sentence(seed, count, _salt(language)))
        count += 1
    return count


def filler_text(sentences: int, depth: float, needle: str, seed: int = 0,
                language: str = "en") -> str:
    """`sentences` sentences of filler with `needle` after `depth` of them (none planted
    when `needle` is empty), in paragraphs."""
    filler = LANGUAGES[language]
    lines = [filler.sentence(seed, n, _salt(language)) for n in range(sentences)]
    if needle:
        lines.insert(round(depth * len(lines)), needle)
    joiner = " " if filler.spaced else ""
    return "\n\n".join(joiner.join(lines[n:n + SENTENCES_PER_PARAGRAPH])
                       for n in range(0, len(lines), SENTENCES_PER_PARAGRAPH))


def haystack(tokens: int, depth: float, needle: str, seed: int = 0,
             language: str = "en") -> str:
    """About `tokens` tokens of filler with `needle` after `depth` of it."""
    return filler_text(sentences_for(tokens, language, seed), depth, needle, seed, language)
