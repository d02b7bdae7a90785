#!/usr/bin/env python3
"""Render tools/chat/conversations.json with a reference engine and record the results for fathom's C++ tests.

Reference (the default): transformers' tokenizer.apply_chat_template, text (tokenize=False) and ids
(tokenize=True), run offline:

    python3 tools/chat/make_golden.py --shared-data <dir> --out tests/chat/data/golden.json

Cross-check without transformers (text only): a Jinja2 environment configured the way transformers configures
its chat-template environment (immutable sandbox, trim_blocks, lstrip_blocks, loopcontrols, a pass-through
{% generation %} tag, json.dumps-based tojson, raise_exception, strftime_now):

    python3 tools/chat/make_golden.py --engine jinja2 --shared-data <dir> --out tests/chat/data/jinja2_reference.json

Each conversation is rendered with every template, once with add_generation_prompt false and once true. A
render that raises is recorded with its error (fathom must raise too). Prints a summary; exits non-zero only
when nothing usable could be produced (missing files, transformers cannot load a tokenizer).
"""
import argparse
import copy
import datetime
import hashlib
import json
import os
import platform
import sys
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def fail(message):
    print(f"make_golden: error: {message}", file=sys.stderr)
    sys.exit(1)


def read_json(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def token_string(value):
    """tokenizer_config tokens are plain strings or AddedToken dicts with 'content'."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def template_source(spec, tokenizer_dir, config):
    if spec.get("template_file"):
        with open(os.path.join(REPO_ROOT, spec["template_file"]), encoding="utf-8") as handle:
            return handle.read()
    chat_template = config.get("chat_template")
    if isinstance(chat_template, str):
        return chat_template
    if isinstance(chat_template, list):
        for entry in chat_template:
            if isinstance(entry, dict) and entry.get("name") == "default":
                return entry["template"]
    jinja_file = os.path.join(tokenizer_dir, "chat_template.jinja")
    if os.path.exists(jinja_file):
        with open(jinja_file, encoding="utf-8") as handle:
            return handle.read()
    fail(f"template {spec['name']}: no chat template in {tokenizer_dir}")


def describe_error(error):
    return {"type": type(error).__name__, "message": str(error)}


def to_id_list(output):
    """apply_chat_template(tokenize=True) returns a list, a dict/BatchEncoding, or tensors depending on version."""
    if hasattr(output, "keys") and "input_ids" in output.keys():
        output = output["input_ids"]
    if hasattr(output, "tolist"):
        output = output.tolist()
    output = list(output)
    if output and isinstance(output[0], (list, tuple)):
        if len(output) != 1:
            raise ValueError(f"expected one sequence of ids, got {len(output)}")
        output = list(output[0])
    return [int(token) for token in output]


class TransformersEngine:
    name = "transformers"

    def __init__(self):
        import transformers  # noqa: F401  (import errors should stop the run with a clear message)
        import tokenizers

        self.transformers = transformers
        self.tokenizers = tokenizers
        self.raw_tokenizers = {}

    def versions(self):
        import jinja2

        return {
            "transformers": self.transformers.__version__,
            "tokenizers": self.tokenizers.__version__,
            "jinja2": jinja2.__version__,
        }

    def load(self, tokenizer_dir, config):
        kwargs = {}
        for key in SPECIAL_TOKEN_KEYS:
            value = token_string(config.get(key))
            if value is not None:
                kwargs[key] = value
        for key in ("model_max_length", "clean_up_tokenization_spaces"):
            if key in config:
                kwargs[key] = config[key]
        tokenizer_file = os.path.join(tokenizer_dir, "tokenizer.json")
        errors = []
        # The tokenizer.json-backed class loads the file as is; AutoTokenizer is the fallback.
        for class_name in ("PreTrainedTokenizerFast", "TokenizersBackend"):
            cls = getattr(self.transformers, class_name, None)
            if cls is None:
                continue
            try:
                return cls(tokenizer_file=tokenizer_file, **kwargs), class_name
            except Exception as error:  # noqa: BLE001
                errors.append(f"{class_name}: {error!r}")
        try:
            tokenizer = self.transformers.AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
            return tokenizer, "AutoTokenizer"
        except Exception as error:  # noqa: BLE001
            errors.append(f"AutoTokenizer: {error!r}")
        fail(f"cannot load a tokenizer from {tokenizer_dir}: " + "; ".join(errors))

    def special_tokens(self, tokenizer, config):
        """What apply_chat_template passes to the template: the tokenizer's special_tokens_map (as strings)."""
        mapping = {}
        try:
            source = dict(tokenizer.special_tokens_map)
        except Exception:  # noqa: BLE001
            source = {key: getattr(tokenizer, key, None) for key in SPECIAL_TOKEN_KEYS}
        for key, value in source.items():
            if isinstance(value, str):
                mapping[key] = value
            elif hasattr(value, "content") and isinstance(value.content, str):
                mapping[key] = value.content
        return mapping

    @staticmethod
    def apply(tokenizer, conversation, **kwargs):
        """apply_chat_template on fresh copies, with return_dict=False (v5 defaults to a dict) where accepted."""
        messages = copy.deepcopy(conversation["messages"])
        tools = copy.deepcopy(conversation.get("tools"))
        extra = copy.deepcopy(conversation.get("extra_context", {}))
        try:
            return tokenizer.apply_chat_template(messages, tools=tools, return_dict=False, **kwargs, **extra)
        except TypeError as error:
            if "return_dict" not in str(error):
                raise
            messages = copy.deepcopy(conversation["messages"])
            return tokenizer.apply_chat_template(messages, tools=tools, **kwargs, **extra)

    def render(self, tokenizer, source, conversation, add_generation_prompt, special_tokens):
        common = dict(add_generation_prompt=add_generation_prompt, chat_template=source)
        text = self.apply(tokenizer, conversation, tokenize=False, **common)
        if isinstance(text, (list, tuple)) and len(text) == 1 and isinstance(text[0], str):
            text = text[0]
        if not isinstance(text, str):
            raise TypeError(f"apply_chat_template(tokenize=False) returned {type(text).__name__}")
        return text, to_id_list(self.apply(tokenizer, conversation, tokenize=True, **common))

    def library_ids(self, tokenizer_dir, text):
        """The raw tokenizers library on tokenizer.json, as an independent check of the ids."""
        if tokenizer_dir not in self.raw_tokenizers:
            self.raw_tokenizers[tokenizer_dir] = self.tokenizers.Tokenizer.from_file(
                os.path.join(tokenizer_dir, "tokenizer.json"))
        return self.raw_tokenizers[tokenizer_dir].encode(text, add_special_tokens=False).ids


class Jinja2Engine:
    """Text-only reference: Jinja2 set up with the options transformers uses for chat templates."""

    name = "jinja2"

    def __init__(self):
        import jinja2
        from jinja2 import nodes
        from jinja2.ext import Extension
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        class GenerationTag(Extension):
            tags = {"generation"}

            def parse(self, parser):
                lineno = next(parser.stream).lineno
                body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
                return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

            def _body(self, caller):
                return caller()

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        def strftime_now(format_string):
            return datetime.datetime.now().strftime(format_string)

        self.jinja2 = jinja2
        self.environment = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, "jinja2.ext.loopcontrols"])
        self.environment.filters["tojson"] = tojson
        self.environment.globals["raise_exception"] = raise_exception
        self.environment.globals["strftime_now"] = strftime_now

    def versions(self):
        return {"jinja2": self.jinja2.__version__}

    def load(self, tokenizer_dir, config):
        return config, "tokenizer_config.json"

    def special_tokens(self, tokenizer, config):
        mapping = {}
        for key in SPECIAL_TOKEN_KEYS:
            value = token_string(config.get(key))
            if value is not None:
                mapping[key] = value
        return mapping

    def render(self, tokenizer, source, conversation, add_generation_prompt, special_tokens):
        template = self.environment.from_string(source)
        context = dict(special_tokens)
        context.update(conversation.get("extra_context", {}))
        text = template.render(
            messages=copy.deepcopy(conversation["messages"]), tools=copy.deepcopy(conversation.get("tools")),
            documents=None, add_generation_prompt=add_generation_prompt, **context)
        return text, None

    def library_ids(self, tokenizer_dir, text):
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared-data", required=True, help="folder holding deepseek-v3/ (the shared data dir)")
    parser.add_argument("--out", required=True, help="output JSON, e.g. tests/chat/data/golden.json")
    parser.add_argument("--conversations", default=os.path.join(REPO_ROOT, "tools", "chat", "conversations.json"))
    parser.add_argument("--engine", choices=("transformers", "jinja2"), default="transformers")
    args = parser.parse_args()

    if not os.path.isdir(args.shared_data):
        fail(f"--shared-data {args.shared_data} is not a directory")
    spec = read_json(args.conversations)
    try:
        engine = TransformersEngine() if args.engine == "transformers" else Jinja2Engine()
    except ImportError as error:
        fail(f"cannot import the {args.engine} engine: {error}")

    result = {
        "generator": {
            "script": "tools/chat/make_golden.py",
            "engine": engine.name,
            "versions": engine.versions(),
            "python": platform.python_version(),
            "conversations_sha256": hashlib.sha256(open(args.conversations, "rb").read()).hexdigest(),
        },
        "templates": {},
        "cases": [],
    }
    summary = []
    id_mismatches = 0
    # With transformers, also render through the plain Jinja2 setup: a difference means transformers does more
    # than configure Jinja2 (e.g. preprocesses messages), which fathom would have to mirror.
    cross_check = Jinja2Engine() if engine.name == "transformers" else None
    cross_check_differences = []
    for template_spec in spec["templates"]:
        name = template_spec["name"]
        tokenizer_dir = os.path.join(args.shared_data, template_spec["tokenizer_dir"])
        config_path = os.path.join(tokenizer_dir, "tokenizer_config.json")
        if not os.path.exists(config_path):
            fail(f"template {name}: {config_path} not found")
        config = read_json(config_path)
        source = template_source(template_spec, tokenizer_dir, config)
        tokenizer, loaded_with = engine.load(tokenizer_dir, config)
        special_tokens = engine.special_tokens(tokenizer, config)
        result["templates"][name] = {
            "tokenizer_dir": template_spec["tokenizer_dir"],
            "template_file": template_spec.get("template_file"),
            "template_sha256": hashlib.sha256(source.encode("utf-8")).hexdigest(),
            "loaded_with": loaded_with,
            "special_tokens_map": special_tokens,
        }
        rendered = errors = 0
        for conversation in spec["conversations"]:
            for add_generation_prompt in (False, True):
                case = {
                    "template": name,
                    "conversation": conversation["name"],
                    "inputs": {
                        "messages": conversation["messages"],
                        "tools": conversation.get("tools"),
                        "add_generation_prompt": add_generation_prompt,
                        "extra_context": conversation.get("extra_context", {}),
                    },
                    "text": None,
                    "ids": None,
                    "error": None,
                }
                try:
                    text, ids = engine.render(tokenizer, source, conversation, add_generation_prompt, special_tokens)
                    case["text"] = text
                    case["ids"] = ids
                    rendered += 1
                    if ids is not None:
                        library_ids = engine.library_ids(tokenizer_dir, text)
                        if library_ids is not None and list(library_ids) != ids:
                            case["ids_tokenizers_library"] = list(library_ids)
                            id_mismatches += 1
                            print(f"warning: {name}/{conversation['name']}/agp={add_generation_prompt}: ids from "
                                  "apply_chat_template differ from tokenizers.Tokenizer.encode", file=sys.stderr)
                except Exception as error:  # noqa: BLE001  (template errors are data: fathom must raise too)
                    case["error"] = describe_error(error)
                    errors += 1
                    if not isinstance(error, (TypeError, ValueError, LookupError)) and "jinja2" not in type(error).__module__:
                        traceback.print_exc()
                if cross_check is not None:
                    try:
                        jinja2_text, _ = cross_check.render(config, source, conversation, add_generation_prompt, special_tokens)
                    except Exception as error:  # noqa: BLE001
                        jinja2_text = f"<raised {type(error).__name__}: {error}>"
                    reference_text = case["text"] if case["error"] is None else f"<raised {case['error']['type']}: {case['error']['message']}>"
                    if jinja2_text != reference_text:
                        cross_check_differences.append((name, conversation["name"], add_generation_prompt, reference_text, jinja2_text))
                result["cases"].append(case)
        summary.append((name, rendered, errors, loaded_with))
        if rendered == 0:
            first_error = next(case["error"] for case in result["cases"] if case["template"] == name)
            fail(f"template {name}: every render raised, which points at the API call, not the template; "
                 f"first error: {first_error}")

    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    temporary = args.out + ".tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(result, handle, ensure_ascii=False, indent=1)
        handle.write("\n")
    os.replace(temporary, args.out)

    print(f"engine: {engine.name} {json.dumps(result['generator']['versions'])}")
    for name, rendered, errors, loaded_with in summary:
        print(f"  {name:22s} rendered {rendered:3d}  raised {errors:3d}  (tokenizer via {loaded_with})")
    print(f"cases: {len(result['cases'])}; ids differing from the tokenizers library: {id_mismatches}")
    if cross_check is not None:
        print(f"renders differing from plain Jinja2 with transformers' settings: {len(cross_check_differences)}")
        for name, conversation_name, add_generation_prompt, reference_text, jinja2_text in cross_check_differences[:5]:
            print(f"  {name}/{conversation_name}/agp={add_generation_prompt}:\n    transformers: {reference_text[:300]!r}"
                  f"\n    jinja2:       {jinja2_text[:300]!r}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
