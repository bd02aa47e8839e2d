"""Languages for the translation tool: names and the codes each model family uses, and a script-based guess.

A language is found by its English name (``Chinese``), an alias (``Mandarin``),
its ISO 639-1 code (``zh``, as opus-mt and M2M100 use), its NLLB-200 code
(``zho_Hans``) or its mBART-50 code (``zh_CN``), in any case.
:func:`guess_language` tells a text's language from its script (Han, kana,
Hangul, Cyrillic, Arabic, ...); Latin-script text is taken as English, so the
observation says when the source language was guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Language", "LANGUAGES", "find_language", "guess_language", "language_names"]


@dataclass(frozen=True)
class Language:
    name: str          # English name, as T5-style prompts spell it ("translate English to German: ")
    iso: str           # ISO 639-1 (opus-mt model ids, M2M100's __xx__ tokens)
    nllb: str          # NLLB-200 code (facebook/nllb-200-*)
    mbart: str = ""    # mBART-50 code (facebook/mbart-large-50-*), where it has the language
    aliases: tuple[str, ...] = ()


LANGUAGES: tuple[Language, ...] = (
    Language("English", "en", "eng_Latn", "en_XX"),
    Language("Chinese", "zh", "zho_Hans", "zh_CN", ("mandarin", "simplified chinese", "chinese (simplified)",
                                                    "zh-cn", "zh-hans", "cn")),
    Language("Traditional Chinese", "zh", "zho_Hant", "", ("chinese (traditional)", "zh-tw", "zh-hant")),
    Language("Cantonese", "yue", "yue_Hant"),
    Language("Japanese", "ja", "jpn_Jpan", "ja_XX", ("jp",)),
    Language("Korean", "ko", "kor_Hang", "ko_KR"),
    Language("French", "fr", "fra_Latn", "fr_XX"),
    Language("German", "de", "deu_Latn", "de_DE"),
    Language("Spanish", "es", "spa_Latn", "es_XX", ("castilian",)),
    Language("Portuguese", "pt", "por_Latn", "pt_XX", ("brazilian portuguese",)),
    Language("Italian", "it", "ita_Latn", "it_IT"),
    Language("Dutch", "nl", "nld_Latn", "nl_XX", ("flemish",)),
    Language("Russian", "ru", "rus_Cyrl", "ru_RU"),
    Language("Ukrainian", "uk", "ukr_Cyrl", "uk_UA"),
    Language("Polish", "pl", "pol_Latn", "pl_PL"),
    Language("Czech", "cs", "ces_Latn", "cs_CZ"),
    Language("Slovak", "sk", "slk_Latn"),
    Language("Slovenian", "sl", "slv_Latn", "sl_SI", ("slovene",)),
    Language("Croatian", "hr", "hrv_Latn", "hr_HR"),
    Language("Serbian", "sr", "srp_Cyrl"),
    Language("Bulgarian", "bg", "bul_Cyrl"),
    Language("Romanian", "ro", "ron_Latn", "ro_RO"),
    Language("Hungarian", "hu", "hun_Latn"),
    Language("Greek", "el", "ell_Grek"),
    Language("Swedish", "sv", "swe_Latn", "sv_SE"),
    Language("Danish", "da", "dan_Latn"),
    Language("Norwegian", "no", "nob_Latn", "", ("bokmal", "norwegian bokmal", "nb")),
    Language("Finnish", "fi", "fin_Latn", "fi_FI"),
    Language("Estonian", "et", "est_Latn", "et_EE"),
    Language("Latvian", "lv", "lvs_Latn", "lv_LV"),
    Language("Lithuanian", "lt", "lit_Latn", "lt_LT"),
    Language("Icelandic", "is", "isl_Latn"),
    Language("Irish", "ga", "gle_Latn"),
    Language("Welsh", "cy", "cym_Latn"),
    Language("Catalan", "ca", "cat_Latn"),
    Language("Turkish", "tr", "tur_Latn", "tr_TR"),
    Language("Arabic", "ar", "arb_Arab", "ar_AR"),
    Language("Hebrew", "he", "heb_Hebr", "he_IL", ("iw",)),
    Language("Persian", "fa", "pes_Arab", "fa_IR", ("farsi",)),
    Language("Urdu", "ur", "urd_Arab", "ur_PK"),
    Language("Hindi", "hi", "hin_Deva", "hi_IN"),
    Language("Bengali", "bn", "ben_Beng", "bn_IN", ("bangla",)),
    Language("Marathi", "mr", "mar_Deva", "mr_IN"),
    Language("Nepali", "ne", "npi_Deva", "ne_NP"),
    Language("Gujarati", "gu", "guj_Gujr", "gu_IN"),
    Language("Tamil", "ta", "tam_Taml", "ta_IN"),
    Language("Telugu", "te", "tel_Telu", "te_IN"),
    Language("Thai", "th", "tha_Thai", "th_TH"),
    Language("Khmer", "km", "khm_Khmr", "km_KH"),
    Language("Burmese", "my", "mya_Mymr", "my_MM", ("myanmar",)),
    Language("Vietnamese", "vi", "vie_Latn", "vi_VN"),
    Language("Indonesian", "id", "ind_Latn", "id_ID"),
    Language("Malay", "ms", "zsm_Latn"),
    Language("Tagalog", "tl", "tgl_Latn", "tl_XX", ("filipino",)),
    Language("Swahili", "sw", "swh_Latn", "sw_KE"),
    Language("Amharic", "am", "amh_Ethi"),
    Language("Yoruba", "yo", "yor_Latn"),
    Language("Zulu", "zu", "zul_Latn"),
    Language("Afrikaans", "af", "afr_Latn", "af_ZA"),
    Language("Esperanto", "eo", "epo_Latn"),
)

_INDEX: dict[str, Language] = {}
for _language in reversed(LANGUAGES):  # earlier entries win ("zh" is simplified Chinese)
    for _key in (_language.name, _language.iso, _language.nllb, _language.mbart, *_language.aliases):
        if _key:
            _INDEX[_key.lower()] = _language


def find_language(value: str) -> Language | None:
    """The language named by ``value`` (a name, an alias or a code), or None."""
    key = " ".join(str(value or "").strip().lower().replace("-", "_").split())
    return _INDEX.get(key) or _INDEX.get(key.replace("_", "-")) or _INDEX.get(key.split("_")[0] if "_" in key
                                                                                   and len(key) <= 5 else "")


def language_names() -> str:
    """The languages' names, for error messages."""
    return ", ".join(language.name for language in LANGUAGES)


# (pattern, ISO code) in the order they are tried: kana before Han (Japanese uses both)
_SCRIPTS = [
    (re.compile(r"[\u3040-\u30ff]"), "ja"), (re.compile(r"[\uac00-\ud7af\u1100-\u11ff]"), "ko"),
    (re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf]"), "zh"), (re.compile(r"[\u0400-\u04ff]"), "ru"),
    (re.compile(r"[\u0600-\u06ff]"), "ar"), (re.compile(r"[\u0590-\u05ff]"), "he"),
    (re.compile(r"[\u0900-\u097f]"), "hi"), (re.compile(r"[\u0980-\u09ff]"), "bn"),
    (re.compile(r"[\u0e00-\u0e7f]"), "th"), (re.compile(r"[\u0370-\u03ff]"), "el"),
    (re.compile(r"[\u0b80-\u0bff]"), "ta"), (re.compile(r"[\u0c00-\u0c7f]"), "te"),
    (re.compile(r"[\u0a80-\u0aff]"), "gu"), (re.compile(r"[\u1780-\u17ff]"), "km"),
    (re.compile(r"[\u1000-\u109f]"), "my"), (re.compile(r"[\u1200-\u137f]"), "am"),
]
_UKRAINIAN = re.compile(r"[\u0456\u0457\u0454\u0491]")  # і ї є ґ


def guess_language(text: str) -> Language:
    """The language of ``text`` from its script; Latin script (and anything unknown) counts as English."""
    sample = text[:2000]
    best, count = "en", 0
    for pattern, iso in _SCRIPTS:
        found = len(pattern.findall(sample))
        if found > count:
            best, count = iso, found
        if iso == "ja" and found:  # any kana: Japanese, whatever the share of Han characters
            best = "ja"
            break
    if best == "ru" and _UKRAINIAN.search(sample):
        best = "uk"
    return _INDEX[best]
