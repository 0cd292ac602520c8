"""Build the deterministic demo prompt file eaglefeed/devtools/demo/sample_prompts.jsonl."""

# ruff: noqa: E501  (prompt texts below are data and keep one prompt per line)

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

OUT_FILE = Path(__file__).resolve().parents[1] / "eaglefeed" / "devtools" / "demo" / "sample_prompts.jsonl"
SEED = 7
SG_ROLE = {"system": "system", "user": "human", "assistant": "gpt", "tool": "tool"}


def _call_id(rng: random.Random) -> str:
    return f"call_{rng.getrandbits(64):016x}"


def _tool_row(rng: random.Random, case: dict, shape: str, sharegpt: bool) -> dict:
    """Build one tool-use conversation in the requested shape (ask, call, final, followup)."""
    msgs: list[dict] = []
    if sharegpt:
        listing = "\n".join(json.dumps(t["function"]) for t in _tools_for(case))
        msgs.append({"role": "system", "content": f"{SG_TOOL_SYSTEM}\n{listing}"})
    elif rng.random() < 0.5:
        msgs.append({"role": "system", "content": rng.choice(SYSTEMS["tools"])})
    msgs.append({"role": "user", "content": case["user"]})
    if shape != "ask":
        ids = [_call_id(rng) for _ in case["calls"]]
        call = {"role": "assistant", "content": ""}
        if sharegpt:
            blocks = [json.dumps({"name": n, "arguments": a}) for n, a in case["calls"]]
            call["content"] = "\n".join(f"<tool_call>\n{b}\n</tool_call>" for b in blocks)
        else:
            call["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for i, (n, a) in zip(ids, case["calls"], strict=True)
            ]
            if rng.random() < 0.6:
                call["reasoning_content"] = case["why"]
        msgs.append(call)
        for i, result in zip(ids, case["results"], strict=True):
            tool = {"role": "tool", "content": json.dumps(result)}
            msgs.append(tool if sharegpt else {**tool, "tool_call_id": i})
    if shape in ("final", "followup"):
        msgs.append({"role": "assistant", "content": case["answer"]})
    if shape == "followup":
        msgs.append({"role": "user", "content": case["followup"]})
    return _as_sharegpt(msgs) if sharegpt else {"messages": msgs, "tools": _tools_for(case)}


def _tools_for(case: dict) -> list[dict]:
    names = [case["tool"], *case.get("extra_tools", [])]
    return [TOOLS[n] for n in names]


def _as_sharegpt(msgs: list[dict]) -> dict:
    turns = []
    for m in msgs:
        value = m["content"]
        if m.get("reasoning_content"):
            value = f"<think>\n{m['reasoning_content']}\n</think>\n\n{value}"
        turns.append({"from": SG_ROLE[m["role"]], "value": value})
    return {"conversations": turns}


def _chat_row(rng: random.Random, turns: list, sharegpt: bool) -> dict:
    """Build a plain chat row from alternating user/assistant turns (assistant may be a tuple)."""
    msgs: list[dict] = []
    if rng.random() < 0.3:
        msgs.append({"role": "system", "content": rng.choice(SYSTEMS["chat"])})
    for idx, turn in enumerate(turns):
        if idx % 2 == 0:
            msgs.append({"role": "user", "content": turn})
        elif isinstance(turn, tuple):
            msgs.append({"role": "assistant", "content": turn[0], "reasoning_content": turn[1]})
        else:
            msgs.append({"role": "assistant", "content": turn})
    return _as_sharegpt(msgs) if sharegpt else {"messages": msgs}


def _sampling(rng: random.Random) -> dict:
    params: dict = {"temperature": rng.choice([0.0, 0.3, 0.6, 0.7, 1.0])}
    if rng.random() < 0.5:
        params["top_p"] = rng.choice([0.8, 0.9, 0.95])
    params["max_new_tokens"] = rng.choice([128, 256, 512, 1024])
    return params


def build_rows() -> list[dict]:
    """Generate every sample row deterministically.

    Returns:
        The rows, each with a unique ``id``, in file order.
    """
    rng = random.Random(SEED)
    shapes = ["ask", "call", "call", "final", "followup"]
    rows = []
    for n, case in enumerate(TOOL_CASES):
        sharegpt = n % 6 == 5
        rows.append(("tools", _tool_row(rng, case, shapes[n % len(shapes)], sharegpt), sharegpt))
    chats = [(cat, [text]) for cat, text in SINGLES] + [("multi", d) for d in DIALOGUES]
    rng.shuffle(chats)
    n_sharegpt = round(0.4 * (len(chats) + len(rows))) - sum(sg for *_, sg in rows)
    for n, (cat, turns) in enumerate(chats):
        rows.append((cat, _chat_row(rng, turns, n < n_sharegpt), n < n_sharegpt))
    rng.shuffle(rows)
    no_think = set(rng.sample(range(len(rows)), k=round(0.3 * len(rows))))
    sampled = set(rng.sample(range(len(rows)), k=round(0.25 * len(rows))))
    out = []
    for n, (cat, row, sharegpt) in enumerate(rows):
        row = {"id": f"{'sg' if sharegpt else 'oai'}-{cat}-{n:03d}", **row}
        if n in no_think:
            row["chat_template_kwargs"] = {"enable_thinking": False}
        if n in sampled:
            row["sampling_params"] = _sampling(rng)
        out.append(row)
    return out


# Prompt content (all written for this demo).


def _fn(name: str, description: str, props: dict, required: list[str]) -> dict:
    params = {"type": "object", "properties": props, "required": required}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": params},
    }


_S, _N, _I = {"type": "string"}, {"type": "number"}, {"type": "integer"}
TOOLS = {
    t["function"]["name"]: t
    for t in [
        _fn(
            "get_weather",
            "Get the current weather for a city.",
            {
                "location": {**_S, "description": "City name, e.g. 'Oslo, Norway'"},
                "unit": {**_S, "enum": ["celsius", "fahrenheit"]},
            },
            ["location"],
        ),
        _fn(
            "search_web",
            "Search the web and return the top results.",
            {"query": _S, "max_results": {**_I, "minimum": 1, "maximum": 10}},
            ["query"],
        ),
        _fn(
            "run_python",
            "Execute a short Python snippet and return stdout.",
            {"code": _S},
            ["code"],
        ),
        _fn(
            "get_stock_price",
            "Latest trade price for a stock ticker.",
            {"ticker": {**_S, "description": "Exchange ticker symbol, e.g. AAPL"}},
            ["ticker"],
        ),
        _fn(
            "convert_currency",
            "Convert an amount between two ISO-4217 currencies.",
            {"amount": _N, "from_currency": _S, "to_currency": _S},
            ["amount", "from_currency", "to_currency"],
        ),
        _fn(
            "create_calendar_event",
            "Create an event in the user's calendar.",
            {
                "title": _S,
                "start": {**_S, "description": "ISO 8601 date-time"},
                "duration_minutes": _I,
                "attendees": {"type": "array", "items": _S},
            },
            ["title", "start"],
        ),
        _fn(
            "lookup_order",
            "Look up the status of a customer order.",
            {"order_id": _S},
            ["order_id"],
        ),
        _fn(
            "get_directions",
            "Route between two places.",
            {
                "origin": _S,
                "destination": _S,
                "mode": {**_S, "enum": ["driving", "walking", "transit", "cycling"]},
            },
            ["origin", "destination"],
        ),
    ]
}
SG_TOOL_SYSTEM = (
    "You are a helpful assistant with access to the following functions. "
    "Call them when they are needed to answer the user."
)


def _weather(city: str, unit: str, temp: int, sky: str) -> dict:
    args = {"location": city, "unit": unit}
    deg = "°C" if unit == "celsius" else "°F"
    return {
        "tool": "get_weather",
        "extra_tools": ["search_web"],
        "user": f"What's the weather like in {city} right now? Should I bring an umbrella?",
        "why": f"The user wants current conditions in {city}; I should call get_weather.",
        "calls": [("get_weather", args)],
        "results": [{"location": city, "temperature": temp, "unit": unit, "conditions": sky}],
        "answer": f"It's {temp}{deg} and {sky} in {city}."
        + (" Yes, take an umbrella." if "rain" in sky else " You can leave the umbrella at home."),
        "followup": "Thanks. What should I wear for an evening walk there?",
    }


def _stocks(a: str, b: str, pa: float, pb: float) -> dict:
    return {
        "tool": "get_stock_price",
        "user": f"Compare the current share prices of {a} and {b}.",
        "why": "I need both prices, so I will request them in parallel.",
        "calls": [("get_stock_price", {"ticker": a}), ("get_stock_price", {"ticker": b})],
        "results": [
            {"ticker": a, "price": pa, "currency": "USD"},
            {"ticker": b, "price": pb, "currency": "USD"},
        ],
        "answer": f"{a} trades at ${pa:.2f} and {b} at ${pb:.2f}; "
        f"{a if pa > pb else b} is the higher-priced share.",
        "followup": "Is a higher share price the same as a more valuable company?",
    }


def _currency(amount: float, src: str, dst: str, rate: float, why: str) -> dict:
    value = round(amount * rate, 2)
    return {
        "tool": "convert_currency",
        "extra_tools": ["get_stock_price"],
        "user": f"How much is {amount:g} {src} in {dst}? {why}",
        "why": f"Convert {amount:g} {src} to {dst} with the conversion tool.",
        "calls": [
            ("convert_currency", {"amount": amount, "from_currency": src, "to_currency": dst})
        ],
        "results": [{"amount": value, "currency": dst, "rate": rate}],
        "answer": f"{amount:g} {src} is about {value:,.2f} {dst} at a rate of {rate}.",
        "followup": "Do banks usually give that exact rate?",
    }


def _search(question: str, query: str, snippet: str, answer: str) -> dict:
    return {
        "tool": "search_web",
        "extra_tools": ["run_python"],
        "user": question,
        "why": "This needs up-to-date information, so I'll search the web.",
        "calls": [("search_web", {"query": query, "max_results": 3})],
        "results": [{"results": [{"title": query.title(), "snippet": snippet}]}],
        "answer": answer,
        "followup": "Can you give me a source I can read for more detail?",
    }


def _python(question: str, code: str, stdout: str, answer: str) -> dict:
    return {
        "tool": "run_python",
        "user": question,
        "why": "Computing this exactly is easier with code.",
        "calls": [("run_python", {"code": code})],
        "results": [{"stdout": stdout, "exit_code": 0}],
        "answer": answer,
        "followup": "Can you explain the code you ran?",
    }


def _calendar(title: str, start: str, minutes: int, people: list[str]) -> dict:
    args = {"title": title, "start": start, "duration_minutes": minutes, "attendees": people}
    return {
        "tool": "create_calendar_event",
        "extra_tools": ["get_weather"],
        "user": f"Book '{title}' on {start[:10]} at {start[11:16]} for {minutes} minutes "
        f"with {', '.join(people)}.",
        "why": "All event details are given, so I can create the event directly.",
        "calls": [("create_calendar_event", args)],
        "results": [
            {"status": "created", "event_id": f"evt_{sum(map(ord, title)) * 7919 % 10**6:06d}"}
        ],
        "answer": f"Done: '{title}' is on your calendar and invites went to {', '.join(people)}.",
        "followup": "Actually, can you move it thirty minutes later?",
    }


def _order(order_id: str, status: str, eta: str) -> dict:
    return {
        "tool": "lookup_order",
        "user": f"Hi, my order {order_id} still hasn't arrived. Where is it?",
        "why": f"I should look up order {order_id} before answering.",
        "calls": [("lookup_order", {"order_id": order_id})],
        "results": [{"order_id": order_id, "status": status, "estimated_delivery": eta}],
        "answer": f"Your order {order_id} is {status.replace('_', ' ')}; "
        f"the estimated delivery date is {eta}.",
        "followup": "If it doesn't arrive by then, what are my options?",
    }


def _route(origin: str, dest: str, mode: str, minutes: int) -> dict:
    return {
        "tool": "get_directions",
        "extra_tools": ["get_weather"],
        "user": f"How long does it take to get from {origin} to {dest} by {mode}?",
        "why": "A routing call will give the travel time.",
        "calls": [("get_directions", {"origin": origin, "destination": dest, "mode": mode})],
        "results": [{"duration_minutes": minutes, "distance_km": round(minutes * 0.4, 1)}],
        "answer": f"By {mode}, {origin} to {dest} takes roughly {minutes} minutes.",
        "followup": "And what about the way back during rush hour?",
    }


TOOL_CASES = [
    _weather("Oslo, Norway", "celsius", 4, "light rain"),
    _weather("Austin, Texas", "fahrenheit", 91, "sunny"),
    _weather("Kyoto, Japan", "celsius", 18, "partly cloudy"),
    _weather("Cape Town, South Africa", "celsius", 22, "windy and clear"),
    _weather("Edinburgh, Scotland", "celsius", 9, "heavy rain showers"),
    _weather("Denver, Colorado", "fahrenheit", 45, "snow flurries"),
    _stocks("AAPL", "MSFT", 227.48, 415.1),
    _stocks("NVDA", "AMD", 131.26, 162.02),
    _stocks("KO", "PEP", 62.35, 171.9),
    _stocks("TSLA", "F", 248.5, 10.87),
    _currency(250, "EUR", "JPY", 161.42, "I'm budgeting for a trip to Tokyo."),
    _currency(1200, "USD", "MXN", 17.05, "It's for rent in Mexico City."),
    _currency(75.5, "GBP", "EUR", 1.17, "Splitting a dinner bill with friends."),
    _currency(3000, "CAD", "INR", 61.3, "I want to send money to my parents."),
    _currency(19.99, "CHF", "USD", 1.13, "Checking a subscription price."),
    _search(
        "Who won the most recent Tour de France?",
        "tour de france winner latest",
        "The latest edition was won after a decisive mountain stage.",
        "According to the search results, the winner secured it on the final mountain stage.",
    ),
    _search(
        "What's the latest stable version of Python?",
        "python latest stable release",
        "Python 3.13 is the newest stable release.",
        "The newest stable release listed is Python 3.13.",
    ),
    _search(
        "Are there any good vegan restaurants near the Louvre?",
        "vegan restaurants near louvre paris",
        "Several plant-based bistros lie within a 10-minute walk of the museum.",
        "Yes, there are several plant-based bistros within about ten minutes' walk.",
    ),
    _search(
        "When does the next total solar eclipse happen in Europe?",
        "next total solar eclipse europe",
        "A total eclipse will cross Spain and Iceland on 12 August 2026.",
        "The next one is on 12 August 2026, visible from Spain and Iceland.",
    ),
    _search(
        "What is the population of Nairobi?",
        "nairobi population",
        "Nairobi's population is estimated at about 4.4 million.",
        "Recent estimates put Nairobi at roughly 4.4 million people.",
    ),
    _python(
        "What is the 50th Fibonacci number?",
        "a, b = 0, 1\nfor _ in range(50):\n    a, b = b, a + b\nprint(a)",
        "12586269025\n",
        "The 50th Fibonacci number is 12,586,269,025.",
    ),
    _python(
        "How many prime numbers are there below 10,000?",
        "print(sum(all(n % d for d in range(2, int(n**0.5) + 1)) for n in range(2, 10000)))",
        "1229\n",
        "There are 1,229 primes below 10,000.",
    ),
    _python(
        "What's the standard deviation of 4, 8, 15, 16, 23, 42?",
        "import statistics\nprint(statistics.pstdev([4, 8, 15, 16, 23, 42]))",
        "12.3153\n",
        "The population standard deviation is about 12.32.",
    ),
    _python(
        "How many days are there between 2024-02-14 and 2024-12-25?",
        "from datetime import date\nprint((date(2024, 12, 25) - date(2024, 2, 14)).days)",
        "315\n",
        "There are 315 days between those dates.",
    ),
    _python(
        "Reverse the words in 'speculative decoding makes inference fast'.",
        "print(' '.join(reversed('speculative decoding makes inference fast'.split())))",
        "fast inference makes decoding speculative\n",
        "Reversed: 'fast inference makes decoding speculative'.",
    ),
    _calendar(
        "Sprint planning", "2025-03-03T10:00:00", 60, ["maria@example.com", "li@example.com"]
    ),
    _calendar("Dentist appointment", "2025-04-11T08:30:00", 45, ["me@example.com"]),
    _calendar(
        "Quarterly review", "2025-06-30T14:00:00", 90, ["cfo@example.com", "ops@example.com"]
    ),
    _calendar("Coffee with Sam", "2025-02-20T16:15:00", 30, ["sam@example.com"]),
    _calendar("Book club", "2025-05-08T19:00:00", 120, ["ana@example.com", "tom@example.com"]),
    _order("A-48213", "in_transit", "2025-03-14"),
    _order("ORD-99107", "delayed_at_customs", "2025-03-21"),
    _order("7751-KX", "out_for_delivery", "today"),
    _order("SHP-20931", "awaiting_pickup", "2025-04-02"),
    _order("B-11873", "label_created", "2025-03-18"),
    _route("Brooklyn Bridge", "Central Park", "transit", 32),
    _route("King's Cross", "Heathrow Airport", "transit", 58),
    _route("Alexanderplatz", "Tempelhofer Feld", "cycling", 24),
    _route("Golden Gate Park", "Fisherman's Wharf", "driving", 21),
    _route("Shibuya Station", "Meiji Shrine", "walking", 19),
    _route("Sagrada Família", "Park Güell", "walking", 27),
    _route("Union Station", "Navy Pier", "driving", 15),
]

SYSTEMS = {
    "chat": [
        "You are a helpful assistant.",
        "You are a concise assistant. Answer in as few words as possible while staying accurate.",
        "You are a patient tutor. Explain ideas step by step and check understanding.",
        "You are a senior software engineer. Prefer idiomatic, well-tested code.",
        "You are a friendly writing coach who gives specific, actionable feedback.",
        "You are a careful math assistant. Show your work and state the final answer clearly.",
        "Respond in a warm, encouraging tone. Use bullet points when listing options.",
        "You are an expert travel planner who favours public transport and local food.",
    ],
    "tools": [
        "You are a helpful assistant. Use the available tools when they help answer the question.",
        "You are a customer-support agent for an online store. Be polite and precise.",
        "You are a personal assistant. Always confirm actions you have taken.",
    ],
}


def _block(category: str, text: str) -> list[tuple[str, str]]:
    lines = [line.strip() for line in text.strip().splitlines()]
    return [(category, line.replace("\\n", "\n")) for line in lines if line]


SINGLES = [
    *_block(
        "coding",
        r"""
    Write a Python function that returns the n-th Fibonacci number using memoization, and explain its time complexity.
    How do I reverse a singly linked list in place in C? Show the code.
    Explain the difference between `let`, `const` and `var` in JavaScript with short examples.
    My pandas DataFrame has a column of dates stored as strings like '2024-03-15'. How do I convert it and group by month?
    Write a SQL query that finds the top 3 customers by total order value in each country.
    What does Rust's borrow checker prevent? Give an example that fails to compile and show how to fix it.
    Write a bash one-liner that counts the lines in all .py files under the current directory, skipping .venv.
    Implement binary search in Go and include table-driven tests.
    Write a Python decorator that retries a function up to 3 times with exponential backoff.
    How can I make a React component re-render only when one specific prop changes?
    Write a regular expression that validates an IPv4 address and explain each part.
    What is the difference between a process and a thread? When should I pick multiprocessing over threading in Python?
    Convert this recursive function to an iterative one:\n\ndef depth(node):\n    if node is None:\n        return 0\n    return 1 + max(depth(node.left), depth(node.right))
    Review this code for bugs:\n\n```python\ndef average(xs):\n    return sum(xs) / len(xs)\n\nprint(average([]))\n```
    Write a Dockerfile for a small FastAPI app on Python 3.12 that runs uvicorn on port 8000.
    How do I write a pytest test that checks a function raises ValueError for negative input?
    Explain Big-O notation to a junior developer using three concrete examples.
    Write a TypeScript type that makes every property of an object optional, recursively.
    What are the pros and cons of using an ORM instead of raw SQL?
    Implement an LRU cache class in Python without using functools.
    Why does `0.1 + 0.2 == 0.3` evaluate to false in most programming languages?
    Which git commands squash my last four commits into one before I push?
    How do I read a 20 GB CSV file in chunks with pandas to keep memory usage low?
    Write a C++ function that checks whether a string is a palindrome, ignoring punctuation and case.
    Design a REST API for a todo app: list the endpoints, methods and example JSON bodies.
    What does this error mean and how do I fix it?\n\nTypeError: 'NoneType' object is not subscriptable
    """,
    ),
    *_block(
        "math",
        r"""
    What is the derivative of x^3 * sin(x)?
    Solve the system of equations: 2x + 3y = 12 and x - y = 1.
    A train leaves at 9:40 and travels 210 km at 84 km/h. What time does it arrive?
    Prove that the square root of 2 is irrational.
    What is the probability of getting at least one six when rolling four fair dice?
    Compute the integral of 1/(1+x^2) from 0 to 1.
    If I invest $5,000 at 4.5% annual interest compounded monthly, how much will I have after 10 years?
    How many distinct ways can the letters of the word BANANA be arranged?
    Explain what an eigenvector is, with a 2x2 example.
    Find all integer solutions of x^2 - y^2 = 45.
    A rectangle has a perimeter of 50 cm and an area of 150 cm^2. What are its side lengths?
    What is the sum of the first 100 odd numbers, and why?
    Explain the Monty Hall problem and why switching doors is the better strategy.
    Is 391 a prime number? Show your reasoning.
    Convert 0.375 to a fraction in lowest terms and to binary.
    What is the expected number of fair coin flips needed to see two heads in a row?
    Simplify (3x^2 - 12) / (x^2 + 4x + 4).
    A recipe needs 3/4 cup of sugar for 12 cookies. How much sugar do I need for 30 cookies?
    Explain Bayes' theorem using a medical test with 1% prevalence and 95% accuracy.
    What is the limit of (1 + 1/n)^n as n goes to infinity, and why does it matter?
    """,
    ),
    *_block(
        "writing",
        r"""
    Write a haiku about debugging code at 3 a.m.
    Draft a polite email to my landlord asking them to fix a leaking kitchen faucet.
    Write a 150-word product description for a reusable stainless-steel water bottle.
    Write the opening paragraph of a mystery novel set in a remote lighthouse.
    Rewrite this sentence to be more concise: "Due to the fact that the meeting was running late, we made the decision to postpone the presentation until a later date."
    Write a short cover letter for a junior data analyst position at a healthcare company.
    Compose a limerick about a cat who learns to code.
    Write a toast for my sister's wedding; she loves hiking and terrible puns.
    Summarize the plot of Romeo and Juliet in five sentences for a 10-year-old.
    Write a LinkedIn post announcing that our team shipped an offline mode for our mobile app.
    Give me five catchy names for a neighbourhood bakery that specializes in sourdough.
    Write a bedtime story about a small robot who is afraid of the dark.
    Turn these notes into a professional meeting summary:\n- budget approved\n- launch moved to May\n- Sam owns QA\n- need a new printing vendor
    Write a persuasive paragraph arguing that cities should build more protected bike lanes.
    Write a sonnet about the ocean at dawn.
    Proofread this: "Their going to the libary tomorow to return there books, weather or not it rains."
    Write a tense dialogue between two astronauts who disagree about aborting a mission.
    Create a short, friendly out-of-office message for the holiday season.
    Write a respectful reply to a customer who received a damaged package.
    Write a four-line nursery rhyme about recycling.
    """,
    ),
    *_block(
        "qa",
        r"""
    Why is the sky blue?
    What caused the fall of the Western Roman Empire?
    How do vaccines train the immune system?
    What is the difference between weather and climate?
    Who was Ada Lovelace and why is she important in computing history?
    How does a refrigerator keep food cold?
    What are black holes, and can anything escape from them?
    Why do we have leap years?
    What is the difference between a virus and a bacterium?
    How do noise-cancelling headphones work?
    What is the greenhouse effect?
    Why does ice float on water?
    What were the main causes of World War I?
    How do airplane wings generate lift?
    What is CRISPR and what is it used for?
    Why do onions make people cry?
    What's the difference between baking soda and baking powder?
    How does GPS figure out where I am?
    What is inflation and how do central banks try to control it?
    How does speculative decoding speed up large language model inference?
    """,
    ),
    *_block(
        "planning",
        r"""
    Plan a 3-day itinerary for Lisbon for someone who loves food and history.
    Help me build a weekly study schedule to prepare for a statistics exam in four weeks.
    I want to start running. Give me an 8-week plan to go from zero to a 5K.
    Create a packing list for a week-long camping trip in the mountains in early autumn.
    Outline a project plan for migrating a company's email from an on-premise server to the cloud.
    Plan a birthday party for a 7-year-old who loves dinosaurs, with a budget of $200.
    Suggest a monthly budget for someone earning $3,200 after tax who lives in a shared apartment.
    Give me a meal-prep plan for five vegetarian lunches that take under an hour in total to cook.
    How should I structure my first 90 days as a new engineering manager?
    Plan a two-week road trip through the national parks of Utah and Arizona.
    Help me organize a community beach clean-up: tasks, timeline and number of volunteers.
    Create a checklist for launching a small online store.
    What steps should I take to prepare my vegetable garden for winter?
    Make a reading plan to get through six classic novels in three months.
    Plan a productive Saturday where I need to clean, shop for groceries, exercise and finish a report.
    """,
    ),
    *_block(
        "misc",
        r"""
    Translate into French: "The meeting has been moved to Thursday afternoon because of the holiday."
    Translate "Where is the nearest pharmacy?" into Spanish, German and Japanese.
    Classify the sentiment of these reviews as positive, negative or neutral:\n1) "Arrived quickly, works great."\n2) "It's okay, nothing special."\n3) "Broke after two days."
    Extract all dates and amounts from this text: "Invoice 1042 dated 12 March 2024 totals €1,250.00; a second payment of €300 is due on 1 April."
    Give me three arguments for and three against a four-day work week.
    Which is heavier, a kilogram of feathers or a kilogram of steel? Explain.
    If all bloops are razzies and all razzies are lazzies, are all bloops definitely lazzies?
    I have 12 balls and one is slightly heavier. What is the minimum number of weighings on a balance scale to find it?
    Suggest five interview questions that assess a candidate's problem-solving skills.
    Explain the difference between correlation and causation with an everyday example.
    What are good strategies to beat procrastination when working from home?
    Recommend three beginner-friendly houseplants for a room with little sunlight, and how to care for them.
    How do I politely decline a meeting invitation that isn't relevant to my work?
    Create a JSON object describing a book with title, author, year, genres and a nested publisher object.
    Convert these names into a markdown table with first-name and last-name columns: Ada Lovelace, Alan Turing, Grace Hopper, Edsger Dijkstra.
    ¿Cuáles son los beneficios de aprender un segundo idioma de adulto?
    Explique en quelques phrases la différence entre l'impressionnisme et l'expressionnisme.
    """,
    ),
]

DIALOGUES = [
    [
        "What's a good name for a golden retriever puppy?",
        "Some favourites: Maple, Biscuit, Sunny, Honey and Cooper.",
        "She's very calm and sleepy. Any names that fit that?",
    ],
    [
        "Write a Python function to check if a number is even.",
        (
            "def is_even(n: int) -> bool:\n    return n % 2 == 0",
            "Simple modulo check; add type hints.",
        ),
        "Now make it work for a list of numbers and return only the even ones.",
    ],
    [
        "I'm learning Spanish. How do I say 'I would like a coffee'?",
        'You can say "Me gustaría un café" or, more casually, "Quisiera un café".',
        "And how would I ask for the bill?",
        'Say "La cuenta, por favor".',
    ],
    [
        "What is 15% of 80?",
        ("15% of 80 is 12.", "0.15 * 80 = 12."),
        "And what is 80 increased by 15%?",
    ],
    [
        "Can you recommend a sci-fi novel?",
        "Try 'The Left Hand of Darkness' by Ursula K. Le Guin: thoughtful and beautifully written.",
        "I've read it. Something with more action?",
        "Then 'Red Rising' by Pierce Brown is a fast-paced choice.",
        "Great. Is it part of a series? How many books?",
    ],
    [
        "My sourdough bread comes out dense. What am I doing wrong?",
        (
            "The usual culprits are an underactive starter, short bulk fermentation or too little "
            "shaping tension.",
            "Dense crumb usually means under-fermentation.",
        ),
        "My starter doubles in about 8 hours. Is that too slow?",
    ],
    [
        "Explain what an API is in one sentence.",
        "An API is a defined way for one piece of software to ask another for data or actions.",
    ],
    [
        "I need to give a 5-minute talk about climate change to high-school students.",
        "Happy to help! Do you want to focus on causes, impacts or solutions?",
        "Solutions, and keep it hopeful. Give me an outline.",
    ],
    [
        "How do I center a div in CSS?",
        "Use flexbox on the parent: `display: flex; justify-content: center; align-items: center;`.",
        "What if I need to support a very old browser without flexbox?",
    ],
    [
        "What's the capital of Australia?",
        ("The capital of Australia is Canberra.", "Common confusion with Sydney; answer Canberra."),
        "Why isn't it Sydney?",
        "Canberra was purpose-built as a compromise between rivals Sydney and Melbourne.",
    ],
    [
        "Help me write a short message wishing my coworker a happy retirement.",
        '"Congratulations on your retirement! Thank you for years of kindness and wisdom. Enjoy every '
        'moment of this new chapter!"',
        "Make it a bit funnier, she always complained about the printer.",
    ],
    [
        "What's the difference between a list and a tuple in Python?",
        "Lists are mutable and tuples are immutable; tuples can also be dictionary keys.",
        "When would I actually prefer a tuple?",
    ],
    [
        "I'm feeling overwhelmed with work. Any quick tips?",
        (
            "Try writing everything down, pick the three most important tasks, and take a short walk "
            "between them.",
            "Empathetic, practical, brief.",
        ),
        "Thanks. How do I tell my manager I have too much on my plate?",
    ],
    [
        "Solve 3x + 7 = 22.",
        ("Subtract 7 to get 3x = 15, then divide by 3: x = 5.", "Linear equation, isolate x."),
        "Now solve 3x^2 + 7 = 34.",
    ],
    [
        "What temperature should I roast vegetables at?",
        "Around 220°C (425°F) works for most vegetables; spread them out so they brown.",
        "How long for carrots and potatoes?",
        "About 35-45 minutes, turning once halfway.",
    ],
    [
        "Translate 'good morning' into Italian.",
        '"Buongiorno."',
        "And 'good night'?",
        '"Buonanotte."',
        "How do I say 'see you tomorrow'?",
    ],
    [
        "Is it safe to run `git rebase` on a branch I already pushed?",
        (
            "It rewrites history, so only do it if nobody else has based work on that branch, then push "
            "with `--force-with-lease`.",
            "Warn about rewriting shared history.",
        ),
        "What does --force-with-lease do differently from --force?",
    ],
    [
        "Summarize the theory of evolution in two sentences.",
        "Species change over generations because individuals with traits that help them survive and "
        "reproduce pass those traits on. Over long periods this natural selection produces new species.",
    ],
    [
        "I have chicken, rice, spinach and lemons. What can I cook tonight?",
        "A lemon chicken and spinach rice bowl: pan-sear the chicken, cook the rice in stock, and wilt "
        "the spinach with lemon zest.",
        "I don't have stock. Will water work?",
    ],
    [
        "What is a p-value?",
        (
            "It's the probability of seeing results at least as extreme as yours if the null hypothesis "
            "were true.",
            "Careful definition; avoid the common misreading.",
        ),
        "So a p-value of 0.03 means there's a 3% chance the null hypothesis is true?",
    ],
    [
        "Write a SQL query to count users per country.",
        "SELECT country, COUNT(*) AS users FROM users GROUP BY country ORDER BY users DESC;",
        "Only include countries with more than 100 users.",
    ],
    [
        "Recommend a board game for four adults.",
        "Try 'Wingspan': relaxing, beautiful and easy to learn.",
        "We prefer something more competitive.",
        "Then 'Ticket to Ride' or 'Catan' bring plenty of friendly rivalry.",
    ],
    [
        "Why does my phone battery drain faster in cold weather?",
        (
            "Cold slows the chemical reactions inside lithium-ion cells, so they deliver less energy.",
            "Chemistry of Li-ion at low temperature.",
        ),
        "Does that damage the battery permanently?",
    ],
    ["Give me a word that means 'very happy'.", "Elated.", "Another one, less formal?"],
    [
        "Convert 5 miles to kilometres.",
        ("5 miles is about 8.05 km.", "1 mile = 1.609 km."),
        "And a marathon distance in miles?",
        ("A marathon is 42.195 km, about 26.2 miles.", "42.195 / 1.609 = 26.2."),
    ],
    [
        "Help me plan a 20-minute workout I can do at home without equipment.",
        "Do 4 rounds of: 40 s squats, 40 s push-ups, 40 s lunges, 40 s plank, 60 s rest.",
        "My knees hurt with lunges. What can I swap in?",
    ],
    [
        "What's the best way to learn to touch type?",
        "Practise 15 minutes a day on a typing trainer, focus on accuracy first, and don't look at the "
        "keyboard.",
        "How long until I'm faster than hunt-and-peck?",
    ],
    [
        "Tell me a fun fact about octopuses.",
        "Octopuses have three hearts and blue, copper-based blood.",
        "Wow. Another one?",
        "Two-thirds of an octopus's neurons are in its arms.",
    ],
    [
        "Is a tomato a fruit or a vegetable?",
        (
            "Botanically it's a fruit; in the kitchen it's treated as a vegetable.",
            "Botanical vs culinary classification.",
        ),
        "Then is a cucumber also a fruit?",
    ],
    [
        "Draft a one-line git commit message for fixing a null pointer crash in the login screen.",
        "Fix null pointer crash when login screen opens without a saved session",
    ],
    [
        "Can you explain what Kafka consumer groups are?",
        (
            "A consumer group is a set of consumers that share a topic's partitions, so each "
            "partition is read by exactly one member of the group.",
            "Core idea: partition assignment within a group.",
        ),
        "What happens if I have more consumers than partitions?",
    ],
    [
        "Write a short poem about autumn leaves.",
        "Amber and rust on the evening breeze,\nletters of summer let go by the trees.",
        "Lovely. Can you add a second stanza about the first frost?",
    ],
    [
        "I'm choosing between a MacBook Air and a ThinkPad for university. I study economics.",
        "Both are great. The Air has longer battery life; the ThinkPad has a better keyboard and "
        "more ports. Do you need any Windows-only software?",
        "We use Stata and Excel a lot, and sometimes EViews.",
        (
            "EViews is Windows-only, so the ThinkPad is the simpler choice for your courses.",
            "EViews runs only on Windows; Stata and Excel are cross-platform.",
        ),
    ],
    [
        "How many cups are in a litre?",
        "About 4.2 US cups, or exactly 4 metric cups of 250 ml.",
        "And how many tablespoons are in a cup?",
    ],
    [
        "What is the time complexity of quicksort?",
        (
            "Average O(n log n); worst case O(n^2) when the pivots are consistently bad.",
            "Mention average and worst case.",
        ),
        "How do real implementations avoid the worst case?",
        "They pick pivots randomly or by median-of-three, and fall back to heapsort when recursion "
        "gets too deep (introsort).",
        "Is Python's sorted() a quicksort then?",
    ],
    [
        "My tomato plant leaves are turning yellow from the bottom up.",
        "That's often a nitrogen deficiency or overwatering. How often do you water it?",
        "Every day, and the pot doesn't have drainage holes.",
    ],
    [
        "Write a function in JavaScript that debounces another function.",
        "function debounce(fn, ms) {\n  let t;\n  return (...args) => {\n    clearTimeout(t);\n"
        "    t = setTimeout(() => fn(...args), ms);\n  };\n}",
        "Can you add a TypeScript signature and a way to cancel it?",
    ],
    [
        "Give me a riddle.",
        "What has keys but can't open locks? A piano.",
        "Ha! A harder one please.",
        (
            "The more of this there is, the less you see. What is it? Darkness.",
            "Pick a classic riddle with a less obvious answer.",
        ),
    ],
    [
        "I'm writing a fantasy novel. Help me name a city built inside a giant tree.",
        "How about Eldhollow, Verdanthal or Rootspire?",
        "I like Rootspire. What would its government be like?",
    ],
    [
        "Explain recursion to me like I'm ten.",
        "Imagine standing in a line and asking the person in front how many people are ahead. Each "
        "person asks the next, until the first says 'zero', and the answers come back, adding one "
        "each time.",
        "That makes sense! What happens if nobody ever says zero?",
        "Then the questions never stop; in a program that's infinite recursion, and it crashes "
        "with a stack overflow.",
    ],
]


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=OUT_FILE, help="output .jsonl path")
    out: Path = parser.parse_args().out
    lines = [json.dumps(row, ensure_ascii=False) for row in build_rows()]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
