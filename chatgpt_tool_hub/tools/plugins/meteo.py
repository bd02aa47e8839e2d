"""``meteo-weather``: current weather and a forecast for a place, from open-meteo (no key).

Two requests: open-meteo's geocoding API finds the place, then the forecast
API gives the current conditions and ``days`` days of maxima, minima and
precipitation, in the place's own time zone.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from ...errors import ToolInputError
from ...runtime.http import HttpSettings, get_json, json_list, json_object
from ..base import Tool, maybe_object

__all__ = ["MeteoWeatherTool", "WEATHER_CODES", "describe_weather_code"]

GEOCODING_URL = "https://geocoding-api.open-meteo.com/v1/search"
FORECAST_URL = "https://api.open-meteo.com/v1/forecast"
MAX_DAYS = 16

# WMO weather interpretation codes, as documented by open-meteo.
WEATHER_CODES = {
    0: "clear sky", 1: "mainly clear", 2: "partly cloudy", 3: "overcast",
    45: "fog", 48: "depositing rime fog",
    51: "light drizzle", 53: "moderate drizzle", 55: "dense drizzle",
    56: "light freezing drizzle", 57: "dense freezing drizzle",
    61: "slight rain", 63: "moderate rain", 65: "heavy rain",
    66: "light freezing rain", 67: "heavy freezing rain",
    71: "slight snowfall", 73: "moderate snowfall", 75: "heavy snowfall", 77: "snow grains",
    80: "slight rain showers", 81: "moderate rain showers", 82: "violent rain showers",
    85: "slight snow showers", 86: "heavy snow showers",
    95: "thunderstorm", 96: "thunderstorm with slight hail", 99: "thunderstorm with heavy hail",
}

_CURRENT = "temperature_2m,apparent_temperature,relative_humidity_2m,wind_speed_10m,weather_code"
_DAILY = "weather_code,temperature_2m_max,temperature_2m_min,precipitation_sum,precipitation_probability_max"
_DAYS_SUFFIX = re.compile(r"^(?P<place>.*?)[\s,;，；]+(?:for\s+|next\s+)?(?P<days>\d{1,2})\s*(?:days?|d|天)?\s*$",
                          flags=re.I)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")


def describe_weather_code(code: Any) -> str:
    try:
        return WEATHER_CODES.get(int(code), f"weather code {code}")
    except (TypeError, ValueError):
        return "unknown conditions"


class MeteoWeatherTool(Tool):
    name = "meteo-weather"
    description = (
        "Current weather and a forecast for a place (city, town or region), from open-meteo. "
        "Input: the place name, optionally followed by the number of days, e.g. 'Berlin' or 'Tokyo, 5 days', "
        "or a JSON object {\"place\": \"Paris\", \"days\": 3}."
    )
    parameters = {
        "type": "object",
        "properties": {
            "place": {"type": "string", "description": "a city, town or region name"},
            "days": {"type": "integer", "minimum": 1, "maximum": MAX_DAYS, "description": "forecast days"},
        },
        "required": ["place"],
    }

    def __init__(self, *, geocoding_url: str = GEOCODING_URL, forecast_url: str = FORECAST_URL,
                 days: int = 3, language: str = "auto", temperature_unit: str = "celsius",
                 http: HttpSettings | None = None):
        self.geocoding_url = geocoding_url
        self.forecast_url = forecast_url
        self.days = max(1, min(MAX_DAYS, int(days)))
        self.language = language
        self.temperature_unit = temperature_unit
        self.http = http or HttpSettings()

    @classmethod
    def from_context(cls, context: Any) -> "MeteoWeatherTool":
        settings = context.settings
        return cls(
            geocoding_url=settings.get("meteo_geocoding_url", GEOCODING_URL),
            forecast_url=settings.get("meteo_forecast_url", FORECAST_URL),
            days=settings.get("meteo_forecast_days", 3),
            language=settings.get("meteo_language", "auto"),
            temperature_unit=settings.get("meteo_temperature_unit", "celsius"),
            http=context.http,
        )

    # "Berlin", "Tokyo, 5 days", "北京 3天" and {"place": ..., "days": ...} all work
    def parse_arguments(self, tool_input: str | Mapping[str, Any]) -> dict[str, Any]:
        if isinstance(tool_input, Mapping):
            arguments = dict(tool_input)
        else:
            text = str(tool_input or "").strip()
            arguments = maybe_object(text) or {"place": text}
        for alias in ("location", "city", "query", "input", "name"):
            if "place" not in arguments and alias in arguments:
                arguments["place"] = arguments.pop(alias)
        place = " ".join(str(arguments.get("place") or "").split()).strip(" ,;'\"")
        if "days" not in arguments:
            match = _DAYS_SUFFIX.match(place)
            if match and match.group("place").strip():
                place, arguments["days"] = match.group("place").strip(" ,;"), int(match.group("days"))
        if not place:
            raise ToolInputError("the meteo-weather tool needs a place name, e.g. 'Berlin' or 'Tokyo, 5 days'")
        arguments["place"] = place
        if isinstance(arguments.get("days"), str) and arguments["days"].strip().isdigit():
            arguments["days"] = int(arguments["days"])
        if isinstance(arguments.get("days"), int) and not isinstance(arguments["days"], bool):
            arguments["days"] = max(1, min(MAX_DAYS, arguments["days"]))
        return self._prepared(arguments)

    def _run(self, place: str, days: int | None = None, **_ignored: Any) -> str:
        days = days or self.days
        found = self._geocode(place)
        if found is None:
            return (f"No place called '{place}' was found by open-meteo's geocoding. "
                    f"Try another spelling, the English name, or a nearby larger city.")
        params = {
            "latitude": found.get("latitude"),
            "longitude": found.get("longitude"),
            "current": _CURRENT,
            "daily": _DAILY,
            "timezone": "auto",
            "forecast_days": days,
        }
        if self.temperature_unit and self.temperature_unit != "celsius":
            params["temperature_unit"] = self.temperature_unit
        forecast = get_json(self.forecast_url, params, timeout=self.http.timeout, proxy=self.http.proxy)
        if not isinstance(forecast, Mapping):
            return f"open-meteo sent no forecast for {found.get('name') or place}."
        return _render(found, forecast, days)

    def _geocode(self, place: str) -> Mapping[str, Any] | None:
        name, _, qualifier = place.partition(",")
        name, qualifier = name.strip() or place, qualifier.strip().lower()
        language = self.language
        if not language or language == "auto":
            language = "zh" if _CJK.search(place) else "en"
        params = {"name": name, "count": 10 if qualifier else 1, "language": language, "format": "json"}
        data = get_json(self.geocoding_url, params, timeout=self.http.timeout, proxy=self.http.proxy)
        results = [r for r in (data.get("results") if isinstance(data, Mapping) else None) or []
                   if isinstance(r, Mapping) and r.get("latitude") is not None and r.get("longitude") is not None]
        if not results:
            return None
        if qualifier:
            for result in results:
                fields = [str(result.get(k) or "").lower() for k in ("country", "country_code", "admin1", "admin2")]
                if any(qualifier == f or (len(qualifier) > 2 and qualifier in f) for f in fields if f):
                    return result
        return results[0]


def _num(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.1f}".rstrip("0").rstrip(".")
    return "?" if value is None else str(value)


def _at(series: Mapping[str, Any], key: str, i: int) -> Any:
    values = series.get(key)
    return values[i] if isinstance(values, list) and i < len(values) else None


def _render(place: Mapping[str, Any], forecast: Mapping[str, Any], days: int) -> str:
    where = ", ".join(dict.fromkeys(str(place[k]) for k in ("name", "admin1", "country") if place.get(k)))
    lat, lon = place.get("latitude"), place.get("longitude")
    tz = forecast.get("timezone") or place.get("timezone") or ""
    coords = f"{lat:.2f}, {lon:.2f}" if isinstance(lat, (int, float)) and isinstance(lon, (int, float)) else "?"
    lines = [f"Weather for {where} ({coords}" + (f"; time zone {tz})" if tz else ")")]

    current = json_object(forecast.get("current"))
    units = json_object(forecast.get("current_units"))
    if current:
        t_unit = units.get("temperature_2m", "°C")
        parts = [f"{_num(current.get('temperature_2m'))} {t_unit}"]
        if current.get("apparent_temperature") is not None:
            parts[0] += f" (feels like {_num(current.get('apparent_temperature'))} {t_unit})"
        parts.append(describe_weather_code(current.get("weather_code")))
        parts.append(f"wind {_num(current.get('wind_speed_10m'))} {units.get('wind_speed_10m', 'km/h')}")
        if current.get("relative_humidity_2m") is not None:
            parts.append(f"humidity {_num(current.get('relative_humidity_2m'))} %")
        lines.append(f"Now ({current.get('time', 'current')}): " + ", ".join(parts))
    elif isinstance(forecast.get("current_weather"), Mapping):  # the older API shape
        cw = forecast["current_weather"]
        lines.append(f"Now ({cw.get('time', 'current')}): {_num(cw.get('temperature'))} °C, "
                     f"{describe_weather_code(cw.get('weathercode'))}, wind {_num(cw.get('windspeed'))} km/h")

    daily = json_object(forecast.get("daily"))
    dunits = json_object(forecast.get("daily_units"))
    dates = json_list(daily.get("time"))
    if dates:
        lines.append(f"Next {min(days, len(dates))} day(s):")
    for i, date in enumerate(dates[:days]):
        t_unit = dunits.get("temperature_2m_max", "°C")
        text = (f"- {date}: {describe_weather_code(_at(daily, 'weather_code', i))}, "
                f"{_num(_at(daily, 'temperature_2m_min', i))} to {_num(_at(daily, 'temperature_2m_max', i))} {t_unit}")
        rain = _at(daily, "precipitation_sum", i)
        if rain is not None:
            text += f", precipitation {_num(rain)} {dunits.get('precipitation_sum', 'mm')}"
        chance = _at(daily, "precipitation_probability_max", i)
        if chance is not None:
            text += f" ({_num(chance)} % chance)"
        lines.append(text)
    if len(lines) == 1:
        lines.append("open-meteo sent no weather data: " + json.dumps(forecast, ensure_ascii=False)[:200])
    return "\n".join(lines)
