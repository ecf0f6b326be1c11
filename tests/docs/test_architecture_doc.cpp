// docs/architecture.md's table "Which folder may include which" says what
// scripts/check-includes.sh enforces: the same folders, each allowed the same folders.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace {

std::string architecture_read(const std::string& relative) {
  std::ifstream in(std::string(TAPEGRAD_SOURCE_DIR) + "/" + relative);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// "autograd/, runtime/, cpu/fast/" -> {autograd, runtime, cpu/fast}; "nothing of the project" -> {}.
std::set<std::string> architecture_folders(const std::string& cell) {
  static const std::regex folder("([a-z/]+?)/?(?:,|$)");
  std::set<std::string> folders;
  if (cell == "nothing of the project") return folders;
  std::string rest = std::regex_replace(cell, std::regex(" "), "");
  for (auto it = std::sregex_iterator(rest.begin(), rest.end(), folder); it != std::sregex_iterator();
       ++it) {
    folders.insert((*it)[1]);
  }
  return folders;
}

}  // namespace

TEST_CASE("docs/architecture.md's include table is the one scripts/check-includes.sh enforces",
          "[docs]") {
  // The script: [folder]="a b c" in its `allowed` table; `*` is anything.
  const std::string script = architecture_read("scripts/check-includes.sh");
  std::map<std::string, std::set<std::string>> enforced;
  static const std::regex entry("\\n\\s*\\[([a-z/.]+)\\]=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(script.begin(), script.end(), entry);
       it != std::sregex_iterator(); ++it) {
    std::set<std::string> folders;
    std::istringstream words((*it)[2].str());
    for (std::string word; words >> word;) folders.insert(word);
    enforced[(*it)[1]] = folders;
  }
  REQUIRE(enforced.size() >= 10);
  REQUIRE(enforced.count("autograd") == 1);

  // The page: | [folder/](../folder/) | may include | what it holds |, one row a folder.
  const std::string page = architecture_read("docs/architecture.md");
  static const std::regex row("\\n\\| \\[([a-z/.]+?)/?\\]\\([^)]*\\) \\| ([^|]+) \\|");
  std::map<std::string, std::string> documented;
  for (auto it = std::sregex_iterator(page.begin(), page.end(), row); it != std::sregex_iterator();
       ++it) {
    documented[(*it)[1]] = (*it)[2];
  }
  for (const auto& [folder, allowed] : enforced) {
    INFO("folder " << folder << " of scripts/check-includes.sh");
    if (allowed.count("*")) continue;  // tests/, examples/: "anything", one row for all three
    REQUIRE(documented.count(folder) == 1);
    if (documented[folder] == "every folder") {
      // cli/: every folder of the table but itself and the test-only ones
      for (const auto& [other, rules] : enforced) {
        if (other == folder || rules.count("*")) continue;
        INFO("cli/ may include " << other);
        CHECK(allowed.count(other) == 1);
      }
      continue;
    }
    CHECK(architecture_folders(documented[folder]) == allowed);
  }
}
