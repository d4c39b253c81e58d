# Checks the tree's shape rules (docs/architecture.md, "The shape of the tree"): every source file opens
# with a line saying what it holds; no source folder holds more than 25 sources; no source file runs
# over 800 lines, no command file over 250; no function over 120 lines. Prints one line per violation
# (file and line) and exits 1 on any. Usage: scripts/check_tree_shape.py [FILE ...] (default: the
# files git tracks).
import ast
import collections
import pathlib
import re
import subprocess
import sys

MAX_SOURCES_PER_FOLDER = 25
MAX_FILE_LINES = 800
MAX_COMMAND_LINES = 250
MAX_FUNCTION_LINES = 120
SOURCE_SUFFIXES = (".cpp", ".h", ".py")


def blank_out_comments_and_literals(text):
    """The text with comments, string and character literals replaced by spaces, newlines kept, so that
    braces and parentheses inside them do not count."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif text.startswith('R"', i) and (m := re.match(r'R"([^(\s]*)\(', text[i:])):
            end = ")" + m.group(1) + '"'
            j = text.find(end, i)
            j = n if j < 0 else j + len(end)
        elif text[i] in "\"'" and not (text[i] == "'" and i > 0 and text[i - 1].isalnum()):
            quote, j = text[i], i + 1
            while j < n and text[j] != quote and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j += 1
        else:
            out.append(text[i])
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", text[i:j]))
        i = j
    return "".join(out)


def cpp_functions(text):
    """(first line, line count) of every function body at namespace or class scope: a brace whose
    header has a parameter list and is not a class, namespace or initializer. Lambdas and blocks
    inside a function count with it."""
    code = blank_out_comments_and_literals(text)
    stack, last, found = [], 0, []
    for match in re.finditer(r"[{};]", code):
        char, pos = match.group(), match.start()
        if char == "{":
            header = code[last:pos]
            if re.search(r"\bnamespace\b|\bextern\s*$", header.strip() + " ") or header.strip().startswith('extern "'):
                kind = "scope"
            elif re.match(r"\s*(template\s*<.*>\s*)?(class|struct|union|enum)\b", header, re.S) and "(" not in header:
                kind = "scope"
            elif all(k == "scope" for k, _ in stack) and ")" in header and not header.rstrip().endswith("="):
                kind = "function"
            else:
                kind = "block"
            start = code.count("\n", 0, last + len(header) - len(header.lstrip())) + 1
            stack.append((kind, start))
        elif char == "}" and stack:
            kind, start = stack.pop()
            if kind == "function":
                found.append((start, code.count("\n", 0, pos) + 1 - start + 1))
        last = pos + 1
    return found


def python_functions(text):
    return [(node.lineno, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def opens_with_summary(path, lines):
    first = lines[0] if lines else ""
    if path.suffix == ".py":
        return first.startswith("#") or first.startswith('"""')
    return first.startswith("//")


def main(argv):
    files = argv or subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout.split()
    paths = [pathlib.Path(f) for f in files if f.endswith(SOURCE_SUFFIXES) and pathlib.Path(f).is_file()]
    problems = []
    per_folder = collections.Counter(str(p.parent) for p in paths if p.parts[0] == "src")
    for folder, count in sorted(per_folder.items()):
        if count > MAX_SOURCES_PER_FOLDER:
            problems.append(f"{folder}/: {count} source files (at most {MAX_SOURCES_PER_FOLDER}: split it by concept)")
    for path in paths:
        text = path.read_text()
        lines = text.splitlines()
        if not opens_with_summary(path, lines):
            problems.append(f"{path}:1: does not open with a line saying what the file holds")
        limit = MAX_COMMAND_LINES if re.match(r"src/cli/cmd_.*\.cpp$", str(path)) else MAX_FILE_LINES
        if len(lines) > limit:
            problems.append(f"{path}: {len(lines)} lines (at most {limit})")
        functions = python_functions(text) if path.suffix == ".py" else cpp_functions(text)
        for start, length in functions:
            if length > MAX_FUNCTION_LINES:
                problems.append(f"{path}:{start}: a function of {length} lines (at most {MAX_FUNCTION_LINES})")
    for problem in problems:
        print(f"error: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
