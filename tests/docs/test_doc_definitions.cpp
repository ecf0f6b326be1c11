// The Markdown pages cite code with line links whose text names what they point at:
//   [`name` path:line](../path#Lline)                 the definition of name
//   [`name` path:first-last](../path#Lfirst-Llast)    its definition, first to last line
//   [`Class::name` path:line](../path#Lline)          the definition of Class's member name
// (a trailing "()" in the name is allowed). The text repeats the place the link points at, and the
// linked line must DEFINE the name, not merely mention it (a call, a parameter, a declaration). A
// line defines `name` when, with comments and string literals set aside, it is
//   - a type: `class|struct|union|enum|namespace name` with a body, or `using name =`,
//     `typedef ... name;`, `#define name`;
//   - a function: a return type (or, for a constructor, a Class::) then `name(`, where the
//     parameter list, wherever it ends, is followed by a body `{` before any `;` (so neither a
//     declaration `...);` nor a call);
//   - a variable, constant or data member: a type then `name` then `;`, `=`, `{` or `[`, outside
//     any parentheses (not a parameter).
// `Class::name` is satisfied by a definition of Class::name, or of name inside the body of class or
// struct Class. A range must cover the definition exactly: from that line to the line its body's
// closing brace is on.
//
// scripts/doc-links.sh finds each definition and rewrites the numbers (--update): after a code
// move, that is the one command to run. This test checks the pages on its own, with the rule above
// written a second time, and runs the script on a small tree to see that it follows a move.
#include <catch2/catch.hpp>

#include "tests/support/run_command.h"
#include "tests/support/temp_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "doc_pages.h"

namespace doc_definitions {

namespace fs = std::filesystem;

const fs::path& kRoot = doc_pages::source_root();
const char* const kFix = "run scripts/doc-links.sh --update (a name that moved to another file, "
                         "or was renamed, is fixed by hand)";

bool is_ident(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

std::string trim(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

// The identifier that ends s ("" when s does not end with one).
std::string last_word(const std::string& s) {
  size_t start = s.size();
  while (start > 0 && is_ident(s[start - 1])) --start;
  return s.substr(start);
}

// The parentheses of s balance: none closed that s did not open, none left open.
bool balanced(const std::string& s) {
  int depth = 0;
  for (const char c : s) {
    if (c == '(') ++depth;
    if (c == ')' && --depth < 0) return false;
  }
  return depth == 0;
}

// The lines with string and character literals emptied and comments blanked, so that no scan
// below sees a brace, a parenthesis or a name inside them.
std::vector<std::string> code_of(const std::vector<std::string>& lines) {
  std::vector<std::string> code;
  bool in_comment = false;
  for (const std::string& line : lines) {
    std::string out;
    for (size_t i = 0; i < line.size(); ++i) {
      const char c = line[i];
      if (in_comment) {
        if (line.compare(i, 2, "*/") == 0) in_comment = false, ++i;
        out += ' ';
        continue;
      }
      if (line.compare(i, 2, "//") == 0) break;
      if (line.compare(i, 2, "/*") == 0) {
        in_comment = true, ++i;
        out += ' ';
        continue;
      }
      if (c == '"' || (c == '\'' && (i == 0 || !is_ident(line[i - 1])))) {
        out += c;
        for (++i; i < line.size() && line[i] != c; ++i) {
          if (line[i] == '\\') ++i;
          out += ' ';
        }
        out += c;
        continue;
      }
      out += c;
    }
    code.push_back(out);
  }
  return code;
}

// From the "(" at column `at` of line k: '{' when a body follows the parameter list (a
// definition), ';' when the statement ends first (a declaration), 0 for anything else (a call
// inside an expression).
char after_parameters(const std::vector<std::string>& code, size_t k, size_t at) {
  int depth = 0;
  for (const size_t stop = std::min(code.size(), k + 40); k < stop; ++k, at = 0) {
    for (size_t i = at; i < code[k].size(); ++i) {
      const char c = code[k][i];
      if (c == '(' || (depth > 0 && c == '{')) {
        ++depth;
      } else if (c == ')' || (depth > 0 && c == '}')) {
        if (--depth < 0) return 0;
      } else if (depth == 0 && (c == '{' || c == ';')) {
        return c;
      } else if (depth == 0 && c == ',') {
        return 0;
      }
    }
  }
  return 0;
}

// The line on which the definition starting at line k ends: its body's closing brace, or the `;`
// of a definition without a body. Braces in parentheses before the body (a default argument `= {}`)
// are not the body.
size_t definition_end(const std::vector<std::string>& code, size_t k) {
  int parens = 0, depth = 0;
  bool opened = false;
  for (; k < code.size(); ++k) {
    for (const char c : code[k]) {
      if (c == '(') ++parens;
      if (c == ')') --parens;
      if (c == '{' && (opened || parens == 0)) ++depth, opened = true;
      if (c == '}' && (opened || parens == 0) && --depth == 0 && opened) return k;
      if (c == ';' && !opened && depth == 0 && parens == 0) return k;
    }
  }
  return code.size() - 1;
}

// Whether line k defines `name`, and the Class of the Class::name it defines ("" when none).
struct Definition {
  bool found = false;
  std::string qualifier;
};

Definition defines(const std::vector<std::string>& code, size_t k, const std::string& name) {
  static const std::regex define(R"(^\s*#\s*define\s+(\w+))");
  static const std::regex not_a_type(
      R"(^(return|else|new|delete|throw|case|goto|co_return|co_yield|co_await|sizeof|using)$|)"
      R"(^(typedef|friend|operator)$)");
  static const std::regex type_keyword(R"(^(class|struct|union|enum|namespace)$)");
  const std::string& line = code[k];
  std::smatch m;
  if (std::regex_search(line, m, define)) return {m[1] == name, ""};
  for (size_t at = line.find(name); at != std::string::npos; at = line.find(name, at + 1)) {
    const std::string after = line.substr(at + name.size());
    if (!after.empty() && is_ident(after[0])) continue;
    if (at > 0 && is_ident(line[at - 1]) && is_ident(name[0])) continue;
    std::string head = line.substr(0, at), qualifier;
    while (head.size() >= 2 && head.ends_with("::")) {  // ns::Class::name: the last qualifier
      head.resize(head.size() - 2);
      const std::string word = last_word(head);
      if (qualifier.empty()) qualifier = word;
      head.resize(head.size() - word.size());
    }
    head = trim(head);
    const std::string rest = trim(after), word = last_word(head);
    if (head.ends_with(".") || head.ends_with("->")) continue;
    if (std::regex_match(word, type_keyword) && !head.starts_with("friend ") &&
        !head.starts_with("typedef ")) {
      if (!rest.starts_with(";") || line.find('{') != std::string::npos) return {true, qualifier};
      continue;
    }
    if (word == "using") {
      if (rest.starts_with("=")) return {true, qualifier};
      continue;
    }
    if (trim(line).starts_with("typedef ") && rest.starts_with(";")) return {true, qualifier};
    if (std::regex_match(word, not_a_type)) continue;
    const bool typed = !head.empty() && (is_ident(head.back()) || head.back() == '>' ||
                                         head.back() == '*' || head.back() == '&') &&
                       balanced(head);
    if (rest.starts_with("(")) {
      if (!typed && !(head.empty() && !qualifier.empty())) continue;
      const size_t paren = at + name.size() + after.find('(');
      if (after_parameters(code, k, paren) == '{') return {true, qualifier};
      continue;
    }
    const bool ends_like_a_variable = rest.starts_with(";") || rest.starts_with("{") ||
                                      rest.starts_with("[") ||
                                      (rest.starts_with("=") && !rest.starts_with("=="));
    if (typed && ends_like_a_variable && !trim(line).ends_with(",") &&
        balanced("(" + after + ")")) {
      return {true, qualifier};
    }
  }
  return {};
}

// Whether line k defines Class::name (cls non-empty) or name.
bool defines_named(const std::vector<std::string>& code, size_t k, const std::string& cls,
                   const std::string& name) {
  const Definition d = defines(code, k, name);
  if (!d.found || cls.empty() || d.qualifier == cls) return d.found;
  if (!d.qualifier.empty()) return false;  // another class's member
  // name defined unqualified: inside the body of class or struct cls?
  const std::regex opens(R"((class|struct)\s+(\w+\s+)?)" + cls + R"((\W|$))");
  for (size_t c = 0; c < k; ++c) {
    if (std::regex_search(code[c], opens) && defines(code, c, cls).found &&
        k <= definition_end(code, c)) {
      return true;
    }
  }
  return false;
}

// Checks one line link of `page`, found on its line `number`.
void check_link(const fs::path& root, const fs::path& page, size_t number,
                const std::string& link) {
  // [`Class::name()` path:first-last](target#Lfirst-Llast): 1 Class::, 2 name, 3 path, 4 first,
  // 5 last, 6 target, 7 first, 8 last (the qualifiers, "()" and the ranges optional).
  static const std::regex cited(R"(^\[`((?:[A-Za-z_]\w*::)*)(~?[A-Za-z_]\w*)(?:\(\))?` )"
                                R"(([^\]:]+):([0-9]+)(?:-([0-9]+))?\])"
                                R"(\(([^)#]+)#L([0-9]+)(?:-L([0-9]+))?\)$)");
  INFO(page.lexically_relative(root).string() << ":" << number << ": " << link);
  std::smatch m;
  if (!std::regex_match(link, m, cited)) {
    FAIL_CHECK("a line link's text reads `name` path:line or `name` path:first-last");
    return;
  }
  const std::string qualifiers = m[1], name = m[2];
  std::string cls = qualifiers.empty() ? "" : qualifiers.substr(0, qualifiers.size() - 2);
  if (const size_t colons = cls.rfind("::"); colons != std::string::npos) {
    cls = cls.substr(colons + 2);
  }
  const fs::path file = (page.parent_path() / m[6].str()).lexically_normal();
  const std::string place = file.lexically_relative(root).string();
  if (m[3] != place || m[4] != m[7] || m[5] != m[8]) {
    FAIL_CHECK("the text must repeat the place the link points at: " << place << ":" << m[7]
               << (m[8].matched ? "-" + m[8].str() : ""));
    return;
  }
  if (!fs::is_regular_file(file)) {
    FAIL_CHECK(place << " does not exist");
    return;
  }
  const std::vector<std::string> lines = doc_pages::read_lines(file), code = code_of(lines);
  const size_t first = std::stoul(m[7]);
  if (first < 1 || first > code.size()) {
    FAIL_CHECK(place << " has " << code.size() << " lines; " << kFix);
  } else if (!defines_named(code, first - 1, cls, name)) {
    FAIL_CHECK("line " << first << " does not define " << qualifiers << name << ": "
               << trim(lines[first - 1]) << "\n" << kFix);
  } else if (m[8].matched && std::stoul(m[8]) != definition_end(code, first - 1) + 1) {
    FAIL_CHECK("the definition ends on line " << definition_end(code, first - 1) + 1 << "; "
                                                << kFix);
  }
}

// Checks every line link of the pages under `root` outside fenced code; returns their number.
int check_line_links(const fs::path& root) {
  static const std::regex any_line_link(R"(\[[^\]]*\]\([^)]*#L[0-9][^)]*\))");
  int links = 0;
  for (const fs::path& page : doc_pages::pages(root)) {
    bool fenced = false;
    const std::vector<std::string> lines = doc_pages::read_lines(page);
    for (size_t number = 1; number <= lines.size(); ++number) {
      const std::string& line = lines[number - 1];
      if (trim(line).starts_with("```")) fenced = !fenced;
      if (fenced) continue;
      for (auto it = std::sregex_iterator(line.begin(), line.end(), any_line_link);
           it != std::sregex_iterator(); ++it) {
        check_link(root, page, number, it->str());
        ++links;
      }
    }
  }
  return links;
}

// Lines of code for the tests of the rule, and whether line `k` (0-based) defines a name.
bool defines_in(const std::vector<std::string>& lines, size_t k, const std::string& cls,
                const std::string& name) {
  return defines_named(code_of(lines), k, cls, name);
}

}  // namespace doc_definitions

namespace dd = doc_definitions;

TEST_CASE("docs: every line link lands on the definition of the name it cites", "[docs]") {
  REQUIRE(dd::check_line_links(dd::kRoot) >= 40);  // docs/engine.md alone cites the engine a lot
}

TEST_CASE("docs: what counts as a definition for a line link", "[docs]") {
  // record()'s parameter `backward`, the mistake this check exists for, is no definition of it.
  const std::vector<std::string> record = {
      "void record(const char* op, const std::vector<Tensor>& inputs, Tensor& output,",
      "            std::vector<Tensor> saved, BackwardFn backward) {",
      "  node->backward = std::move(backward);",
      "}",
      "void backward(const Tensor& root, const Tensor& grad, bool retain_graph) {",
      "  record(\"matmul\", {a, b}, out, {a, b}, [](const Tensor& g, const Node& n) {",
      "    return Grads{g, g};",
      "  });",
      "}"};
  CHECK(dd::defines_in(record, 0, "", "record"));
  CHECK_FALSE(dd::defines_in(record, 1, "", "backward"));  // a parameter
  CHECK_FALSE(dd::defines_in(record, 2, "", "backward"));  // an assignment to a member
  CHECK(dd::defines_in(record, 4, "", "backward"));
  CHECK_FALSE(dd::defines_in(record, 4, "", "retain_graph"));
  CHECK_FALSE(dd::defines_in(record, 5, "", "record"));  // a call, though its line ends in {
  CHECK_FALSE(dd::defines_in(record, 6, "", "Grads"));
  CHECK(dd::definition_end(dd::code_of(record), 0) == 3);
  CHECK(dd::definition_end(dd::code_of(record), 4) == 8);

  const std::vector<std::string> header = {
      "// struct Edge { is a comment, and so is format_tape(",
      "struct Node;",
      "struct Node {",
      "  std::shared_ptr<Node> grad_fn;  // the node",
      "  BackwardFn backward;",
      "  bool needs_grad(size_t input) const { return inputs[input].node != nullptr; }",
      "  ~Node();",
      "  void release();",
      "};",
      "TapeGraph describe_tape(const Tensor& output,",
      "                        const TensorNames& names = {});",
      "using Grads = std::vector<Tensor>;",
      "#define TG_CHECK(condition, ...) check(condition)",
      "constexpr int64_t kParallelAdamElements = 1 << 15;",
      "thread_local std::vector<std::weak_ptr<Node>> tape;",
      "std::string format_tape() { return \"format_tape(\"; }"};
  CHECK_FALSE(dd::defines_in(header, 0, "", "Edge"));
  CHECK_FALSE(dd::defines_in(header, 0, "", "format_tape"));
  CHECK_FALSE(dd::defines_in(header, 1, "", "Node"));  // a forward declaration
  CHECK(dd::defines_in(header, 2, "", "Node"));
  CHECK(dd::definition_end(dd::code_of(header), 2) == 8);
  CHECK(dd::defines_in(header, 3, "", "grad_fn"));
  CHECK(dd::defines_in(header, 4, "Node", "backward"));  // a data member, inside struct Node
  CHECK(dd::defines_in(header, 5, "Node", "needs_grad"));
  CHECK(dd::definition_end(dd::code_of(header), 5) == 5);
  CHECK_FALSE(dd::defines_in(header, 5, "Edge", "needs_grad"));  // not Edge's
  CHECK_FALSE(dd::defines_in(header, 6, "Node", "~Node"));       // declared, defined elsewhere
  CHECK_FALSE(dd::defines_in(header, 7, "", "release"));
  CHECK_FALSE(dd::defines_in(header, 9, "", "describe_tape"));  // the `;` is on the next line
  CHECK(dd::defines_in(header, 11, "", "Grads"));
  CHECK(dd::defines_in(header, 12, "", "TG_CHECK"));
  CHECK(dd::defines_in(header, 13, "", "kParallelAdamElements"));
  CHECK(dd::defines_in(header, 14, "", "tape"));
  CHECK_FALSE(dd::defines_in(header, 14, "", "weak_ptr"));
  CHECK(dd::defines_in(header, 15, "", "format_tape"));

  const std::vector<std::string> members = {
      "Node::~Node() {",
      "  while (next) next = release(next);",
      "}",
      "NoGrad::NoGrad() : previous_(grad_mode) { grad_mode = false; }",
      "void Optimizer::zero_grad() {",
      "  for (Tensor& p : params_) p.zero_grad();",
      "}",
      "Tensor Tensor::detach() const {",
      "  const Tensor out = x.detach();",
      "  if (t.detach().defined()) {}",
      "}"};
  CHECK(dd::defines_in(members, 0, "Node", "~Node"));
  CHECK(dd::defines_in(members, 3, "NoGrad", "NoGrad"));
  CHECK(dd::defines_in(members, 4, "Optimizer", "zero_grad"));
  CHECK(dd::defines_in(members, 4, "", "zero_grad"));  // an unqualified name takes any class's
  CHECK_FALSE(dd::defines_in(members, 4, "SGD", "zero_grad"));
  CHECK_FALSE(dd::defines_in(members, 5, "", "zero_grad"));
  CHECK(dd::defines_in(members, 7, "Tensor", "detach"));
  CHECK_FALSE(dd::defines_in(members, 8, "", "detach"));
  CHECK(dd::defines_in(members, 8, "", "out"));
  CHECK_FALSE(dd::defines_in(members, 9, "", "detach"));

  const std::vector<std::string> loops = {
      "for (int64_t i = 0; i < n; ++i) {",
      "  double dot = 0;  // s_ij = q_i . k_j",
      "  dot += q[i] * k[i];",
      "  d_scores[i] = probs[i] * (d_probs[i] - dot);",
      "  return dot;",
      "}"};
  CHECK_FALSE(dd::defines_in(loops, 0, "", "i"));  // inside the for's parentheses
  CHECK(dd::defines_in(loops, 1, "", "dot"));
  CHECK_FALSE(dd::defines_in(loops, 2, "", "dot"));
  CHECK_FALSE(dd::defines_in(loops, 3, "", "d_scores"));
  CHECK_FALSE(dd::defines_in(loops, 4, "", "dot"));
}

TEST_CASE("scripts/doc-links.sh --update follows a definition that moved", "[docs]") {
  const tg::testing::TempDir tree;
  std::filesystem::create_directories(tree.path / "scripts");
  std::filesystem::create_directories(tree.path / "docs");
  std::filesystem::create_directories(tree.path / "src");
  std::filesystem::copy_file(dd::kRoot / "scripts/doc-links.sh",
                             tree.path / "scripts/doc-links.sh");
  // The function moved from line 2 to line 5; the page still cites line 2, and 1-3 as its range.
  tg::testing::write_bytes(tree.file("src/a.cpp"), "// a\n"
                                                   "int helper(int x);\n"
                                                   "\n"
                                                   "// the one the page cites\n"
                                                   "int helper(int x) {\n"
                                                   "  return x + 1;\n"
                                                   "}\n");
  tg::testing::write_bytes(tree.file("docs/page.md"),
                           "[`helper` src/a.cpp:2](../src/a.cpp#L2) and "
                           "[`helper` src/a.cpp:1-3](../src/a.cpp#L1-L3).\n");
  const std::string script = "'" + tree.file("scripts/doc-links.sh") + "'";

  auto [output, status] = tg::testing::run_command(script + " --check 2>&1");
  INFO(output);
  CHECK(status == 1);
  CHECK(output.find("run scripts/doc-links.sh --update") != std::string::npos);

  std::tie(output, status) = tg::testing::run_command(script + " --update 2>&1");
  CHECK(status == 0);
  CHECK(tg::testing::read_bytes(tree.file("docs/page.md")) ==
        "[`helper` src/a.cpp:5](../src/a.cpp#L5) and "
        "[`helper` src/a.cpp:5-7](../src/a.cpp#L5-L7).\n");
  CHECK(dd::check_line_links(tree.path) == 2);  // and this test's own rule agrees

  std::tie(output, status) = tg::testing::run_command(script + " --check 2>&1");
  CHECK(status == 0);

  // A name with no definition left in the file is an error, not a guess.
  tg::testing::write_bytes(tree.file("src/a.cpp"), "int renamed(int x) { return x; }\n");
  std::tie(output, status) = tg::testing::run_command(script + " --update 2>&1");
  CHECK(status == 1);
  CHECK(output.find("no definition of helper in src/a.cpp") != std::string::npos);
}

TEST_CASE("scripts/doc-links.sh --check agrees that every line link is current", "[docs]") {
  const std::string script = (dd::kRoot / "scripts/doc-links.sh").string();
  const auto [output, status] = tg::testing::run_command("'" + script + "' --check 2>&1");
  INFO(output);
  CHECK(status == 0);
}
