// docs/design-notes.md says how many entry points the kernel interface has: "N entry points a
// device must provide, and M more with a default it may override". This test counts the virtual
// functions of `struct Kernels` in autograd/kernels.h (the pure ones, `= 0`, and those with a
// body; the destructor aside) and checks both numbers, so that the page follows the interface.
#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace design_notes {

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  INFO("cannot open " << path);
  REQUIRE(file.good());
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// The text of `struct name { ... };` in `header`, from the line that opens it to the `};` that
// closes it in column 0.
std::string struct_body(const std::string& header, const std::string& name) {
  const size_t start = header.find("\nstruct " + name + " {");
  REQUIRE(start != std::string::npos);
  const size_t end = header.find("\n};", start);
  REQUIRE(end != std::string::npos);
  return header.substr(start, end - start);
}

struct VirtualCount {
  int pure = 0, with_default = 0;
};

// Each `virtual` of the body up to its first `;` or `{`: pure when that is `= 0;`, with a default
// when a body `{` comes first; a destructor is neither.
VirtualCount count_virtuals(const std::string& body) {
  static const std::regex pure_end(R"(=\s*0\s*$)");
  VirtualCount count;
  for (size_t at = body.find("virtual "); at != std::string::npos;
       at = body.find("virtual ", at + 1)) {
    const size_t end = body.find_first_of(";{", at);
    REQUIRE(end != std::string::npos);
    const std::string declaration = body.substr(at, end - at);
    if (declaration.find('~') != std::string::npos) continue;
    if (body[end] == '{') {
      ++count.with_default;
    } else if (std::regex_search(declaration, pure_end)) {
      ++count.pure;
    }
  }
  return count;
}

}  // namespace design_notes

TEST_CASE("docs/design-notes.md counts the kernel interface's entry points", "[docs]") {
  namespace dn = design_notes;
  const std::string root = TAPEGRAD_SOURCE_DIR;
  const dn::VirtualCount kernels =
      dn::count_virtuals(dn::struct_body(dn::read_text(root + "/autograd/kernels.h"), "Kernels"));
  REQUIRE(kernels.pure > 20);  // the interface a device implements is there at all

  const std::string notes = dn::read_text(root + "/docs/design-notes.md");
  static const std::regex stated(R"(([0-9]+) entry points a device must provide, and ([0-9]+))"
                                 R"( more with a default it may\s+override)");
  std::smatch m;
  INFO("docs/design-notes.md must say \"N entry points a device must provide, and M more with a "
       "default it may override\"");
  REQUIRE(std::regex_search(notes, m, stated));
  INFO("autograd/kernels.h: " << kernels.pure << " pure virtual functions, "
                              << kernels.with_default << " with a default");
  CHECK(std::stoi(m[1]) == kernels.pure);
  CHECK(std::stoi(m[2]) == kernels.with_default);
}

TEST_CASE("docs: the count of virtual functions tells pure ones from defaults", "[docs]") {
  const std::string body = "\nstruct Kernels {\n"
                           "  virtual ~Kernels() = default;\n"
                           "  virtual void copy(const Tensor& src,\n"
                           "                    const Tensor& dst) = 0;\n"
                           "  // not virtual: a comment\n"
                           "  virtual int levels() { return 127; }\n"
                           "  virtual bool fused(const Tensor& g) {\n"
                           "    return false;\n"
                           "  }\n"
                           "  virtual void fill(const Tensor& dst, double value) = 0;\n"
                           "  void helper();\n";
  const design_notes::VirtualCount count = design_notes::count_virtuals(body);
  CHECK(count.pure == 2);
  CHECK(count.with_default == 2);
}
