"""Tests of scripts/check_tree_shape.py: each rule refuses what it should, names the file and line, and
lets through what only looks like a violation (braces in strings and comments, classes, lambdas)."""
import contextlib
import io
import os
import pathlib
import sys
import tempfile
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import check_tree_shape  # noqa: E402


def body(lines):
    return "\n".join("  x += 1;" for _ in range(lines))


class FunctionLengths(unittest.TestCase):
    def test_a_function_counts_from_its_header_to_its_closing_brace(self):
        text = "// f\nnamespace a {\nint f() {\n" + body(3) + "\n}\n}  // namespace a\n"
        self.assertEqual(check_tree_shape.cpp_functions(text), [(3, 5)])

    def test_lambdas_and_blocks_count_with_their_function_and_classes_do_not_count(self):
        text = ("struct S {\n  int g() {\n    auto l = [] { return 1; };\n    if (true) {\n    }\n"
                "    return l();\n  }\n};\n")
        self.assertEqual(check_tree_shape.cpp_functions(text), [(2, 6)])

    def test_braces_in_strings_comments_and_raw_strings_are_not_code(self):
        text = 'int f() {\n  const char* s = "{{{";  // }}}\n  auto r = R"x({)x";\n  char c = \'{\';\n}\n'
        self.assertEqual(check_tree_shape.cpp_functions(text), [(1, 5)])

    def test_python_functions_are_measured_by_their_syntax_tree(self):
        self.assertEqual(check_tree_shape.python_functions("def f():\n    a = 1\n    return a\n"), [(1, 3)])


class WholeTree(unittest.TestCase):
    def run_on(self, files):
        with tempfile.TemporaryDirectory() as root:
            for name, text in files.items():
                path = pathlib.Path(root, name)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            cwd = os.getcwd()
            os.chdir(root)
            try:
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    code = check_tree_shape.main(sorted(files))
            finally:
                os.chdir(cwd)
            return code, out.getvalue().splitlines()

    def test_a_tree_within_every_rule_passes(self):
        self.assertEqual(self.run_on({"src/a/a.cpp": "// a\nint f() {\n}\n", "src/a/a.h": "// a\n#pragma once\n"}),
                         (0, []))

    def test_each_rule_names_the_file_and_line(self):
        long_function = "// f\nint f() {\n" + body(125) + "\n}\n"
        files = {
            "src/a/no_summary.cpp": "#include <x>\n",
            "src/a/long_function.cpp": long_function,
            "src/a/long_file.cpp": "// long\n" + "\n" * 800,
            "src/cli/cmd_long.cpp": "// command\n" + "\n" * 250,
            **{f"src/b/f{i}.h": "// f\n" for i in range(26)},
        }
        code, lines = self.run_on(files)
        self.assertEqual(code, 1)
        self.assertEqual(lines, [
            "error: src/b/: 26 source files (at most 25: split it by concept)",
            "error: src/a/long_file.cpp: 801 lines (at most 800)",
            "error: src/a/long_function.cpp:2: a function of 127 lines (at most 120)",
            "error: src/a/no_summary.cpp:1: does not open with a line saying what the file holds",
            "error: src/cli/cmd_long.cpp: 251 lines (at most 250)",
        ])


if __name__ == "__main__":
    unittest.main()
