"""fathom-nano's chat template and its synthetic chat data (pure Python; rendering needs jinja2 only).

The template is DeepSeek-V3's official chat template (hf-deepseek-v3/tokenizer_config.json) with these changes,
all small and documented in tools/train/README.md:
  1. `tools` are rendered into the system prompt: "## Tools\\nYou can call these functions:" and one JSON object
     (the `function` part of each OpenAI tool, through `tojson`) per line.
  2. A tool-call message is always closed with <｜tool▁calls▁end｜><｜end▁of▁sentence｜> (the official template closes
     it only after a second call), it is recognised by a non-empty `tool_calls` (content None or ""), text content
     before the calls is kept, and `arguments` given as an object are serialised with `tojson`.
  3. Tool-call and tool-output state is kept per message: an assistant turn that follows tool outputs (text or a
     new call) starts with <｜tool▁outputs▁end｜>; a user turn after tool outputs closes them too.
  4. As in the R1 template, an earlier assistant turn's `<think>...</think>` is dropped from the history (not the
     last message's, so that training renders keep it).
The synthetic conversations teach the model the DeepSeek-V3 tool-call format (a call naming one of the given
functions with JSON arguments, a plain answer that uses the tool output), plain chat, and `<think>` reasoning.
"""
import json
import random

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
PAD = "<｜▁pad▁｜>"
# Added tokens after the BPE vocabulary, in DeepSeek-V3's order (R1's <think> / </think> last).
# (content, special) as in DeepSeek's tokenizer.json.
TAIL_TOKENS = [
    ("<｜fim▁hole｜>", False), ("<｜fim▁begin｜>", False), ("<｜fim▁end｜>", False),
    ("<｜User｜>", False), ("<｜Assistant｜>", False), ("<|EOT|>", True),
    ("<｜tool▁calls▁begin｜>", False), ("<｜tool▁calls▁end｜>", False),
    ("<｜tool▁call▁begin｜>", False), ("<｜tool▁call▁end｜>", False),
    ("<｜tool▁outputs▁begin｜>", False), ("<｜tool▁outputs▁end｜>", False),
    ("<｜tool▁output▁begin｜>", False), ("<｜tool▁output▁end｜>", False),
    ("<｜tool▁sep｜>", False), ("<think>", False), ("</think>", False),
]

# One Jinja statement per line for reading; joined without the line breaks (like the official one-line template),
# so trim_blocks / lstrip_blocks cannot change the output. Jinja string escapes (\n) are kept as written.
_TEMPLATE_LINES = r"""
{%- if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}
{%- set ns = namespace(system_prompt='', is_first_sp=true, is_tool=false) %}
{%- for message in messages %}
{%- if message['role'] == 'system' %}
{%- if ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + message['content'] %}{% set ns.is_first_sp = false %}
{%- else %}{% set ns.system_prompt = ns.system_prompt + '\n\n' + message['content'] %}{% endif %}
{%- endif %}
{%- endfor %}
{%- if tools %}
{%- if not ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + '\n\n' %}{% endif %}
{%- set ns.system_prompt = ns.system_prompt + '## Tools\nYou can call these functions:' %}
{%- for tool in tools %}
{%- if tool['function'] is defined %}{% set ns.system_prompt = ns.system_prompt + '\n' + (tool['function'] | tojson) %}
{%- else %}{% set ns.system_prompt = ns.system_prompt + '\n' + (tool | tojson) %}{% endif %}
{%- endfor %}
{%- endif %}
{{- bos_token }}{{ ns.system_prompt }}
{%- for message in messages %}
{%- if message['role'] == 'user' %}
{%- if ns.is_tool %}{{ '<｜tool▁outputs▁end｜>' }}{% set ns.is_tool = false %}{% endif %}
{{- '<｜User｜>' + message['content'] }}
{%- elif message['role'] == 'assistant' %}
{%- if message['tool_calls'] is defined and message['tool_calls'] %}
{%- if ns.is_tool %}{{ '<｜tool▁outputs▁end｜>' }}{% set ns.is_tool = false %}{% else %}{{ '<｜Assistant｜>' }}{% endif %}
{%- if message['content'] is string %}{{ message['content'] }}{% endif %}
{{- '<｜tool▁calls▁begin｜>' }}
{%- for tool in message['tool_calls'] %}
{%- if not loop.first %}{{ '\n' }}{% endif %}
{%- if tool['function']['arguments'] is string %}{% set arguments = tool['function']['arguments'] %}
{%- else %}{% set arguments = tool['function']['arguments'] | tojson %}{% endif %}
{{- '<｜tool▁call▁begin｜>function<｜tool▁sep｜>' + tool['function']['name'] + '\n```json\n' + arguments + '\n```<｜tool▁call▁end｜>' }}
{%- endfor %}
{{- '<｜tool▁calls▁end｜><｜end▁of▁sentence｜>' }}
{%- else %}
{%- if message['content'] is string %}{% set content = message['content'] %}{% else %}{% set content = '' %}{% endif %}
{%- if not loop.last and '</think>' in content %}{% set content = content.split('</think>')[-1].lstrip() %}{% endif %}
{%- if ns.is_tool %}{{ '<｜tool▁outputs▁end｜>' + content + '<｜end▁of▁sentence｜>' }}{% set ns.is_tool = false %}
{%- else %}{{ '<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>' }}{% endif %}
{%- endif %}
{%- elif message['role'] == 'tool' %}
{%- if ns.is_tool %}{{ '\n<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>' }}
{%- else %}{{ '<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>' }}{% set ns.is_tool = true %}{% endif %}
{%- endif %}
{%- endfor %}
{%- if ns.is_tool %}{{ '<｜tool▁outputs▁end｜>' }}{% endif %}
{%- if add_generation_prompt and not ns.is_tool %}{{ '<｜Assistant｜>' }}{% endif %}
"""
CHAT_TEMPLATE = "".join(line.strip() for line in _TEMPLATE_LINES.strip().splitlines())


def jinja_environment():
    """A Jinja2 environment set up the way transformers sets up its chat-template environment."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.exceptions import TemplateError

    def raise_exception(message):
        raise TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


class Renderer:
    def __init__(self, template=CHAT_TEMPLATE):
        self.template = jinja_environment().from_string(template)

    def __call__(self, messages, tools=None, add_generation_prompt=False):
        return self.template.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                    bos_token=BOS, eos_token=EOS, pad_token=EOS)


# ------------------------------------------------------------------------------------------ vocabulary of the data
CITIES = [
    "Paris", "London", "Tokyo", "New York", "Berlin", "Madrid", "Rome", "Sydney", "Toronto", "Moscow", "Beijing",
    "Cairo", "Mumbai", "Delhi", "Seoul", "Bangkok", "Istanbul", "Dubai", "Singapore", "Amsterdam", "Vienna",
    "Prague", "Warsaw", "Lisbon", "Dublin", "Oslo", "Stockholm", "Helsinki", "Copenhagen", "Athens", "Budapest",
    "Zurich", "Geneva", "Brussels", "Munich", "Hamburg", "Milan", "Barcelona", "Chicago", "Boston", "Seattle",
    "San Francisco", "Los Angeles", "Miami", "Denver", "Austin", "Houston", "Dallas", "Atlanta", "Phoenix",
    "Vancouver", "Montreal", "Mexico City", "Lima", "Bogota", "Santiago", "Buenos Aires", "Sao Paulo",
    "Rio de Janeiro", "Nairobi", "Lagos", "Cape Town", "Johannesburg", "Casablanca", "Tehran", "Karachi", "Lahore",
    "Dhaka", "Jakarta", "Manila", "Hanoi", "Kuala Lumpur", "Osaka", "Kyoto", "Shanghai", "Hong Kong", "Taipei",
    "Melbourne", "Auckland", "Wellington", "Reykjavik", "Edinburgh", "Manchester", "Lyon", "Marseille", "Nice",
    "Porto", "Seville", "Valencia", "Naples", "Florence", "Venice", "Krakow", "Kyiv", "Riga", "Tallinn", "Vilnius",
    "Sofia", "Bucharest", "Belgrade", "Zagreb", "Ljubljana", "Bratislava", "Minsk", "Doha", "Riyadh", "Amman",
    "Beirut", "Tel Aviv", "Baghdad", "Kabul", "Tashkent", "Almaty", "Ulaanbaatar", "Havana", "Panama City",
    "Quito", "Caracas", "Montevideo", "Accra", "Addis Ababa", "Dakar", "Tunis", "Algiers", "Perth", "Brisbane",
    "Adelaide", "Honolulu", "Anchorage", "Portland", "Detroit", "Philadelphia", "Washington", "Nashville",
    "New Orleans", "Las Vegas", "San Diego", "Ottawa", "Calgary", "Quebec City", "Bogotá", "São Paulo", "Zürich",
]
CITY_SUFFIX = {
    "Paris": ["France"], "London": ["UK", "England"], "Tokyo": ["Japan"], "Berlin": ["Germany"],
    "Madrid": ["Spain"], "Rome": ["Italy"], "Sydney": ["Australia"], "Toronto": ["Canada"], "Bogotá": ["Colombia"],
    "Boston": ["MA"], "Seattle": ["WA"], "San Francisco": ["CA"], "Los Angeles": ["CA"], "Chicago": ["IL"],
    "Austin": ["TX"], "Houston": ["TX"], "Miami": ["FL"], "Denver": ["CO"], "New York": ["NY"],
    "Lima": ["Peru"], "Cairo": ["Egypt"], "Seoul": ["South Korea"], "Mumbai": ["India"], "Oslo": ["Norway"],
}
TIMEZONES = {
    "Paris": "Europe/Paris", "London": "Europe/London", "Tokyo": "Asia/Tokyo", "New York": "America/New_York",
    "Berlin": "Europe/Berlin", "Madrid": "Europe/Madrid", "Rome": "Europe/Rome", "Sydney": "Australia/Sydney",
    "Toronto": "America/Toronto", "Moscow": "Europe/Moscow", "Beijing": "Asia/Shanghai", "Cairo": "Africa/Cairo",
    "Mumbai": "Asia/Kolkata", "Seoul": "Asia/Seoul", "Bangkok": "Asia/Bangkok", "Dubai": "Asia/Dubai",
    "Singapore": "Asia/Singapore", "Chicago": "America/Chicago", "Los Angeles": "America/Los_Angeles",
    "Denver": "America/Denver", "Mexico City": "America/Mexico_City", "Sao Paulo": "America/Sao_Paulo",
    "Lagos": "Africa/Lagos", "Jakarta": "Asia/Jakarta", "Auckland": "Pacific/Auckland", "Istanbul": "Europe/Istanbul",
}
CONDITIONS = ["sunny", "cloudy", "partly cloudy", "rainy", "snowy", "windy", "foggy", "clear", "stormy", "overcast",
              "drizzling", "humid"]
COMPANIES = {"Apple": "AAPL", "Microsoft": "MSFT", "Google": "GOOGL", "Alphabet": "GOOGL", "Amazon": "AMZN",
             "Tesla": "TSLA", "Nvidia": "NVDA", "Meta": "META", "Netflix": "NFLX", "Intel": "INTC", "IBM": "IBM",
             "Oracle": "ORCL", "Adobe": "ADBE", "Salesforce": "CRM", "AMD": "AMD", "Qualcomm": "QCOM",
             "Coca-Cola": "KO", "Disney": "DIS", "Boeing": "BA", "Visa": "V", "Walmart": "WMT", "Nike": "NKE",
             "Pfizer": "PFE", "Ford": "F", "Toyota": "TM", "Sony": "SONY", "Uber": "UBER", "Spotify": "SPOT"}
TOPICS = ["the history of Python", "quantum computing", "the tallest mountain in Europe", "black holes",
          "the French Revolution", "machine learning", "the speed of light", "photosynthesis", "the Roman Empire",
          "electric cars", "climate change", "the Great Wall of China", "vaccines", "the Moon landing",
          "renewable energy", "the Linux kernel", "DNA", "volcanoes", "the Olympic Games", "coffee",
          "the internet", "dinosaurs", "the stock market", "solar panels", "honey bees", "the Amazon rainforest",
          "jazz music", "chess openings", "the Eiffel Tower", "deep sea fish", "recursion", "the printing press"]
CURRENCIES = ["USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "CNY", "INR", "SEK", "NOK", "MXN", "BRL", "KRW"]
CAPITALS = {"France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Japan": "Tokyo",
            "China": "Beijing", "Canada": "Ottawa", "Australia": "Canberra", "Brazil": "Brasilia", "Egypt": "Cairo",
            "India": "New Delhi", "Russia": "Moscow", "Mexico": "Mexico City", "Argentina": "Buenos Aires",
            "Portugal": "Lisbon", "Greece": "Athens", "Norway": "Oslo", "Sweden": "Stockholm", "Finland": "Helsinki",
            "Denmark": "Copenhagen", "Poland": "Warsaw", "Austria": "Vienna", "Ireland": "Dublin", "Kenya": "Nairobi",
            "Peru": "Lima", "Chile": "Santiago", "Turkey": "Ankara", "South Korea": "Seoul", "Thailand": "Bangkok",
            "Vietnam": "Hanoi", "Netherlands": "Amsterdam", "Belgium": "Brussels", "Switzerland": "Bern",
            "Hungary": "Budapest", "Czech Republic": "Prague", "Iceland": "Reykjavik", "Nigeria": "Abuja",
            "Morocco": "Rabat", "Indonesia": "Jakarta", "New Zealand": "Wellington", "Colombia": "Bogota",
            "Ukraine": "Kyiv", "Cuba": "Havana", "Iran": "Tehran", "Saudi Arabia": "Riyadh", "Philippines": "Manila"}
SYSTEM_PROMPTS = ["You are a helpful assistant.", "You are a helpful assistant with access to tools.",
                  "You are fathom-nano, a small assistant.", "Answer briefly.", "You are a friendly assistant.",
                  "Use the tools when they help answer the question.", "You are a concise and accurate assistant."]


def _pick(rng, items):
    return items[rng.randrange(len(items))]


def _schema(key, description, extra=None, required=None, typ="string", strict=False):
    props = {key: {"type": typ, "description": description}}
    props.update(extra or {})
    schema = {"type": "object", "properties": props, "required": required or [key]}
    if strict:
        schema["additionalProperties"] = False
    return schema


def _tool(name, description, parameters, rng):
    fn = {"name": name, "description": description, "parameters": parameters}
    if rng.random() < 0.2:
        fn["strict"] = True
    return {"type": "function", "function": fn}


# ----------------------------------------------------------------------------------------------- tool kinds
class ToolKind:
    """make_tool(rng) -> (tool, info); ask(rng, info) -> (question, arguments, output, answer)."""


def _city(rng):
    city = _pick(rng, CITIES)
    if city in CITY_SUFFIX and rng.random() < 0.3:
        return city, f"{city}, {_pick(rng, CITY_SUFFIX[city])}"
    return city, city


class Weather(ToolKind):
    names = ["get_weather", "get_current_weather", "weather", "lookup_weather", "fetch_weather", "current_weather",
             "get_weather_forecast", "weather_now"]
    keys = ["city", "location", "city_name", "place"]
    descriptions = ["Get the current weather for a city.", "Get current temperature for a given location.",
                    "Returns the current weather in a location.", "Look up today's weather.",
                    "Get the weather conditions and temperature for a place."]
    key_descriptions = ["The city name, e.g. Paris", "City and country e.g. Bogotá, Colombia",
                        "The city and state, e.g. San Francisco, CA", "Name of the city", "The location"]
    questions = ["What's the weather like in {q}?", "What is the weather in {q} today?", "How is the weather in {q}?",
                 "Is it raining in {q} right now?", "Tell me the current temperature in {q}.", "weather in {q}",
                 "Do I need an umbrella in {q} today?", "What's the temperature in {q}?",
                 "Can you check the weather in {q} for me?", "How hot is it in {q}?", "What's the weather in {q} right now?",
                 "What is the weather like today in {q}?", "Is it cold in {q}?", "Weather forecast for {q}, please.",
                 "I'm travelling to {q}. What's the weather there?", "What's the current weather in {q}?"]

    def make_tool(self, rng):
        key = _pick(rng, self.keys)
        extra, unit = None, rng.random() < 0.3
        if unit:
            extra = {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}
        tool = _tool(_pick(rng, self.names), _pick(rng, self.descriptions),
                     _schema(key, _pick(rng, self.key_descriptions), extra, strict=rng.random() < 0.3), rng)
        return tool, {"key": key, "unit": unit}

    def ask(self, rng, info):
        city, spoken = _city(rng)
        question = _pick(rng, self.questions).format(q=spoken)
        args = {info["key"]: spoken}
        fahrenheit = info["unit"] and rng.random() < 0.3
        if fahrenheit:
            question = question.rstrip("?.") + " in fahrenheit?"
            args["unit"] = "fahrenheit"
        temp = rng.randint(-10, 38)
        cond = _pick(rng, CONDITIONS)
        if fahrenheit:
            temp, unit_text = round(temp * 9 / 5 + 32), "°F"
        else:
            unit_text = "°C"
        style = rng.randrange(3)
        if style == 0:
            output = json.dumps({"location": spoken, "temperature": temp, "unit": "fahrenheit" if fahrenheit else "celsius",
                                 "condition": cond})
        elif style == 1:
            output = json.dumps({"temperature": temp, "conditions": cond})
        else:
            output = f"{temp}{unit_text}, {cond}"
        answer = _pick(rng, [f"It is currently {temp}{unit_text} and {cond} in {city}.",
                             f"The weather in {city} is {cond} with a temperature of {temp}{unit_text}.",
                             f"In {city} it is {cond} and {temp}{unit_text} right now.",
                             f"Right now {city} has {cond} weather at {temp}{unit_text}."])
        return question, args, output, answer


OPS = [("+", "plus", lambda a, b: a + b), ("-", "minus", lambda a, b: a - b), ("*", "times", lambda a, b: a * b),
       ("/", "divided by", lambda a, b: a / b)]


def _arith(rng):
    sym, word, fn = _pick(rng, OPS)
    a = rng.randint(1, 999) if rng.random() < 0.7 else rng.randint(1, 99999)
    b = rng.randint(1, 99) if sym in "*/" else rng.randint(1, 999)
    r = fn(a, b)
    if isinstance(r, float):
        r = int(r) if r == int(r) else round(r, 4)
    return a, b, sym, word, r


class Calculator(ToolKind):
    names = ["calculator", "calculate", "evaluate", "math_eval", "compute", "evaluate_expression", "run_calculation",
             "calc"]
    keys = ["expression", "expr", "input", "formula"]
    descriptions = ["Evaluate a math expression.", "A simple calculator.", "Compute the value of an arithmetic expression.",
                    "Calculate the result of a mathematical expression."]
    key_descriptions = ["The expression to evaluate, e.g. 2 + 2", "A math expression", "Arithmetic expression"]
    questions = ["What is {a} {s} {b}?", "Calculate {a} {s} {b}.", "What's {a} {w} {b}?", "Compute {a} {s} {b} for me.",
                 "How much is {a} {s} {b}?", "Please work out {a} {s} {b}.", "What is {a} {w} {b}?", "{a} {s} {b} = ?",
                 "Use the calculator: {a} {s} {b}", "Can you calculate {a} {w} {b}?"]

    def make_tool(self, rng):
        key = _pick(rng, self.keys)
        tool = _tool(_pick(rng, self.names), _pick(rng, self.descriptions),
                     _schema(key, _pick(rng, self.key_descriptions), strict=rng.random() < 0.3), rng)
        return tool, {"key": key}

    def ask(self, rng, info):
        a, b, s, w, r = _arith(rng)
        question = _pick(rng, self.questions).format(a=a, b=b, s=s, w=w)
        args = {info["key"]: f"{a} {s} {b}"}
        output = json.dumps({"result": r}) if rng.random() < 0.5 else str(r)
        answer = _pick(rng, [f"{a} {s} {b} = {r}.", f"The result is {r}.", f"{a} {w} {b} is {r}.",
                             f"The answer is {r}."])
        return question, args, output, answer


class TwoNumbers(ToolKind):
    kinds = [("+", "plus", ["add", "add_numbers", "sum_two_numbers", "addition"], "Add two numbers."),
             ("*", "times", ["multiply", "multiply_numbers", "product", "mul"], "Multiply two numbers."),
             ("-", "minus", ["subtract", "subtract_numbers", "difference"], "Subtract b from a.")]
    key_pairs = [("a", "b"), ("x", "y"), ("first", "second"), ("num1", "num2")]
    questions = ["What is {a} {s} {b}?", "What's {a} {w} {b}?", "Calculate {a} {s} {b}.", "How much is {a} {w} {b}?",
                 "Compute {a} {s} {b}."]

    def make_tool(self, rng):
        sym, word, names, desc = _pick(rng, self.kinds)
        k1, k2 = _pick(rng, self.key_pairs)
        typ = _pick(rng, ["integer", "number"])
        params = {"type": "object", "properties": {k1: {"type": typ}, k2: {"type": typ}}, "required": [k1, k2]}
        return _tool(_pick(rng, names), desc, params, rng), {"keys": (k1, k2), "sym": sym, "word": word}

    def ask(self, rng, info):
        a, b = rng.randint(1, 500), rng.randint(1, 99)
        s, w = info["sym"], info["word"]
        r = a + b if s == "+" else (a * b if s == "*" else a - b)
        question = _pick(rng, self.questions).format(a=a, b=b, s=s, w=w)
        args = {info["keys"][0]: a, info["keys"][1]: b}
        output = str(r) if rng.random() < 0.5 else json.dumps({"result": r})
        answer = _pick(rng, [f"{a} {s} {b} = {r}.", f"The result is {r}.", f"{a} {w} {b} is {r}."])
        return question, args, output, answer


class Time(ToolKind):
    names = ["get_current_time", "get_time", "current_time", "get_local_time", "time_now"]
    questions = ["What time is it in {q}?", "What's the current time in {q}?", "Tell me the local time in {q}.",
                 "What is the time in {q} right now?", "Do you know what time it is in {q}?"]

    def make_tool(self, rng):
        key = _pick(rng, ["city", "location", "timezone"])
        desc = "IANA timezone name, e.g. Europe/Paris" if key == "timezone" else "The city name"
        return _tool(_pick(rng, self.names), _pick(rng, ["Get the current local time.", "Returns the time in a place."]),
                     _schema(key, desc), rng), {"key": key}

    def ask(self, rng, info):
        if info["key"] == "timezone":
            city = _pick(rng, sorted(TIMEZONES))
            value, spoken = TIMEZONES[city], city
        else:
            city, value = _city(rng)
            spoken = value
        hh, mm = rng.randint(0, 23), rng.randint(0, 59)
        t = f"{hh:02d}:{mm:02d}"
        output = json.dumps({"time": t}) if rng.random() < 0.5 else t
        answer = _pick(rng, [f"It is {t} in {city}.", f"The current time in {city} is {t}.", f"In {city} it is now {t}."])
        return _pick(rng, self.questions).format(q=spoken), {info["key"]: value}, output, answer


class Stock(ToolKind):
    names = ["get_stock_price", "stock_quote", "get_share_price", "lookup_stock"]
    questions = ["What is the stock price of {c}?", "How much is {c} stock trading at?", "Get me the share price of {c}.",
                 "What's {c}'s stock price today?"]

    def make_tool(self, rng):
        key = _pick(rng, ["symbol", "ticker"])
        return _tool(_pick(rng, self.names), "Get the latest stock price for a ticker symbol.",
                     _schema(key, "Ticker symbol, e.g. AAPL"), rng), {"key": key}

    def ask(self, rng, info):
        company = _pick(rng, sorted(COMPANIES))
        symbol = COMPANIES[company]
        spoken = symbol if rng.random() < 0.4 else company
        price = round(rng.uniform(5, 900), 2)
        output = json.dumps({"symbol": symbol, "price": price})
        answer = _pick(rng, [f"{spoken} is trading at ${price}.", f"The current price of {symbol} is ${price}."])
        return _pick(rng, self.questions).format(c=spoken), {info["key"]: symbol}, output, answer


class Search(ToolKind):
    names = ["search_web", "web_search", "search", "lookup", "search_internet"]
    questions = ["Search the web for {t}.", "Find information about {t}.", "Look up {t} online.",
                 "Can you search for {t}?", "Search for {t}."]

    def make_tool(self, rng):
        key = _pick(rng, ["query", "q", "search_query"])
        return _tool(_pick(rng, self.names), "Search the internet and return the top result.",
                     _schema(key, "The search query"), rng), {"key": key}

    def ask(self, rng, info):
        topic = _pick(rng, TOPICS)
        output = json.dumps({"title": topic.capitalize(), "snippet": f"An overview of {topic} with key facts and history."})
        answer = _pick(rng, [f"I found an overview of {topic} with its key facts and history.",
                             f"Here is what I found: an overview of {topic} with key facts and history."])
        return _pick(rng, self.questions).format(t=topic), {info["key"]: topic}, output, answer


class Currency(ToolKind):
    names = ["convert_currency", "currency_converter", "exchange_currency"]

    def make_tool(self, rng):
        keys = _pick(rng, [("amount", "from_currency", "to_currency"), ("amount", "from", "to"), ("value", "source", "target")])
        params = {"type": "object", "properties": {keys[0]: {"type": "number"}, keys[1]: {"type": "string"},
                                                     keys[2]: {"type": "string"}}, "required": list(keys)}
        return _tool(_pick(rng, self.names), "Convert an amount between currencies.", params, rng), {"keys": keys}

    def ask(self, rng, info):
        amount = rng.choice([10, 20, 50, 100, 250, 500, 1000, rng.randint(1, 5000)])
        src, dst = rng.sample(CURRENCIES, 2)
        question = _pick(rng, ["How much is {a} {s} in {d}?", "Convert {a} {s} to {d}.", "What is {a} {s} in {d}?"]).format(
            a=amount, s=src, d=dst)
        value = round(amount * rng.uniform(0.01, 150), 2)
        k = info["keys"]
        return question, {k[0]: amount, k[1]: src, k[2]: dst}, json.dumps({"result": value, "currency": dst}), \
            _pick(rng, [f"{amount} {src} is about {value} {dst}.", f"That is {value} {dst}."])


TOOL_KINDS = [Weather(), Calculator(), TwoNumbers(), Time(), Stock(), Search(), Currency()]
TOOL_WEIGHTS = [5, 3, 2, 2, 1, 1, 1]

# --------------------------------------------------------------------------------------------- plain chat
GREETINGS = ["Hello!", "Hi", "Hey there", "Hello, who are you?", "Who are you?", "What can you do?", "Good morning!",
             "Hi! How are you?", "hello", "Hey, what's up?"]
GREETING_ANSWERS = ["Hello! I am fathom-nano, a small assistant model. How can I help you today?",
                    "Hi! I'm fathom-nano, a small language model. What can I do for you?",
                    "Hello! I can answer simple questions, write small Python functions and call tools. How can I help?"]
THANKS = ["Thanks!", "Thank you.", "Great, thanks!", "Thanks a lot."]
THANKS_ANSWERS = ["You're welcome!", "Glad I could help!", "You're welcome. Anything else?"]
CODE_TASKS = [
    (["Write a Python function that returns the sum of a list.", "How do I sum a list of numbers in Python?"],
     "def sum_list(values):\n    total = 0\n    for value in values:\n        total += value\n    return total"),
    (["Write a function to reverse a string.", "How can I reverse a string in Python?"],
     "def reverse_string(text):\n    return text[::-1]"),
    (["Write a Python function that computes the factorial of n.", "Implement factorial in Python."],
     "def factorial(n):\n    if n <= 1:\n        return 1\n    return n * factorial(n - 1)"),
    (["Write a Python function that returns the n-th Fibonacci number.", "Implement fibonacci in Python."],
     "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a"),
    (["Write a function that checks if a number is even.", "How do I test whether a number is even in Python?"],
     "def is_even(n):\n    return n % 2 == 0"),
    (["Write a function that returns the largest element of a list.", "How do I find the maximum of a list?"],
     "def largest(values):\n    best = values[0]\n    for value in values[1:]:\n        if value > best:\n            best = value\n    return best"),
    (["Write a function that counts the vowels in a string.", "Count vowels in a string in Python."],
     "def count_vowels(text):\n    return sum(1 for ch in text.lower() if ch in \"aeiou\")"),
    (["Write a function that converts Celsius to Fahrenheit.", "How do I convert Celsius to Fahrenheit in Python?"],
     "def celsius_to_fahrenheit(celsius):\n    return celsius * 9 / 5 + 32"),
    (["How do I read a file line by line in Python?", "Write code that reads a text file line by line."],
     "with open(\"input.txt\") as handle:\n    for line in handle:\n        print(line.rstrip())"),
    (["Write a function that checks whether a string is a palindrome.", "How do I check for a palindrome in Python?"],
     "def is_palindrome(text):\n    cleaned = text.lower().replace(\" \", \"\")\n    return cleaned == cleaned[::-1]"),
    (["Write a function that removes duplicates from a list.", "How do I remove duplicates from a list and keep the order?"],
     "def unique(values):\n    seen = set()\n    result = []\n    for value in values:\n        if value not in seen:\n            seen.add(value)\n            result.append(value)\n    return result"),
    (["Write a function that checks if a number is prime.", "How do I test if a number is prime in Python?"],
     "def is_prime(n):\n    if n < 2:\n        return False\n    i = 2\n    while i * i <= n:\n        if n % i == 0:\n            return False\n        i += 1\n    return True"),
    (["Write a function that squares every number in a list.", "Square all elements of a list in Python."],
     "def squares(values):\n    return [value * value for value in values]"),
    (["How do I parse JSON in Python?", "Write code that loads a JSON string."],
     "import json\n\ndata = json.loads('{\"name\": \"fathom\"}')\nprint(data[\"name\"])"),
    (["Write a binary search function in Python.", "Implement binary search."],
     "def binary_search(values, target):\n    lo, hi = 0, len(values) - 1\n    while lo <= hi:\n        mid = (lo + hi) // 2\n        if values[mid] == target:\n            return mid\n        if values[mid] < target:\n            lo = mid + 1\n        else:\n            hi = mid - 1\n    return -1"),
]
CODE_INTROS = ["Here is a simple implementation:", "Sure:", "You can do it like this:", "Here you go:"]


def _code_answer(rng, code):
    return f"{_pick(rng, CODE_INTROS)}\n\n```python\n{code}\n```"


def _think(rng, reasoning, answer):
    return f"<think>\n{reasoning}\n</think>\n\n{answer}"


def plain_turn(rng, allow_think=True):
    """(user, assistant) for a conversation without a tool call."""
    kind = rng.random()
    if kind < 0.15:
        return _pick(rng, GREETINGS), _pick(rng, GREETING_ANSWERS)
    if kind < 0.45:
        questions, code = _pick(rng, CODE_TASKS)
        answer = _code_answer(rng, code)
        if allow_think and rng.random() < 0.25:
            answer = _think(rng, "The user wants a short Python function. I will write a simple, readable version.", answer)
        return _pick(rng, questions), answer
    if kind < 0.65:
        country = _pick(rng, sorted(CAPITALS))
        capital = CAPITALS[country]
        q = _pick(rng, ["What is the capital of {c}?", "What's the capital city of {c}?", "Name the capital of {c}."])
        answer = f"The capital of {country} is {capital}."
        if allow_think and rng.random() < 0.3:
            answer = _think(rng, f"The question asks for the capital of {country}. The capital of {country} is {capital}.", answer)
        return q.format(c=country), answer
    if kind < 0.85:  # small arithmetic, always with reasoning
        a, b = rng.randint(0, 50), rng.randint(0, 50)
        s, w, r = _pick(rng, [("+", "plus", a + b), ("-", "minus", a - b)])
        q = _pick(rng, ["What is {a} {s} {b}?", "What's {a} {w} {b}?", "Compute {a} {s} {b}."]).format(a=a, b=b, s=s, w=w)
        answer = f"{a} {s} {b} = {r}."
        if allow_think:
            answer = _think(rng, f"The user asks for {a} {s} {b}. {a} {s} {b} = {r}.", answer)
        return q, answer
    a, b = rng.sample(range(1, 1000), 2)  # comparisons, always with reasoning
    big = max(a, b)
    q = _pick(rng, ["Which is larger, {a} or {b}?", "Which number is bigger: {a} or {b}?"]).format(a=a, b=b)
    answer = f"{big} is larger."
    if allow_think:
        answer = _think(rng, f"I need to compare {a} and {b}. {big} is the larger number.", answer)
    return q, answer


def _call_id(rng):
    return "call_" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(8))


def _tools(rng, main_kind):
    """The main tool plus up to two distractors of other kinds, shuffled; returns (tools, main_info, main_name)."""
    arithmetic = (Calculator, TwoNumbers)
    others = [k for k in rng.sample(TOOL_KINDS, len(TOOL_KINDS))
              if k is not main_kind and not (isinstance(k, arithmetic) and isinstance(main_kind, arithmetic))]
    kinds = [main_kind] + others[: rng.choice([0, 0, 1, 1, 2])]
    rng.shuffle(kinds)
    tools, info, name = [], None, None
    for k in kinds:
        tool, i = k.make_tool(rng)
        tools.append(tool)
        if k is main_kind:
            info, name = i, tool["function"]["name"]
    return tools, info, name


def conversation(rng):
    """One synthetic conversation: {"messages": [...], "tools": [...] or None}."""
    messages = []
    if rng.random() < 0.4:
        messages.append({"role": "system", "content": _pick(rng, SYSTEM_PROMPTS)})
    r = rng.random()
    if r < 0.5:  # a tool call, its output, and an answer that uses it
        kind = rng.choices(TOOL_KINDS, weights=TOOL_WEIGHTS)[0]
        tools, info, name = _tools(rng, kind)
        question, args, output, answer = kind.ask(rng, info)
        if rng.random() < 0.15:  # a chat turn before the tool question
            u, a = plain_turn(rng)
            messages += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
        cid = _call_id(rng)
        messages += [{"role": "user", "content": question},
                     {"role": "assistant", "content": None if rng.random() < 0.7 else "",
                      "tool_calls": [{"id": cid, "type": "function",
                                      "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}]},
                     {"role": "tool", "tool_call_id": cid, "content": output},
                     {"role": "assistant", "content": answer}]
        if rng.random() < 0.1:
            messages += [{"role": "user", "content": _pick(rng, THANKS)},
                         {"role": "assistant", "content": _pick(rng, THANKS_ANSWERS)}]
        return {"messages": messages, "tools": tools}
    if r < 0.6:  # tools offered, but the question needs none
        kind = rng.choices(TOOL_KINDS, weights=TOOL_WEIGHTS)[0]
        tools, _, _ = _tools(rng, kind)
        u, a = plain_turn(rng, allow_think=False)
        messages += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
        return {"messages": messages, "tools": tools}
    for _ in range(1 if rng.random() < 0.8 else 2):  # plain chat, one or two turns
        u, a = plain_turn(rng)
        messages += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
    return {"messages": messages, "tools": None}


def conversations(seed, count):
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        out.append(conversation(rng))
    return out
