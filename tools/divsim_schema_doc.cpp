// divsim-schema-doc: prints the HDF5 schema table (src/record/schema.hpp) as the Markdown tables of
// docs/hdf5-schema.md; tools/gen-schema-doc.sh splices them into the doc, between its prose.
#include <iostream>
#include <string>
#include <string_view>

#include "record/schema.hpp"

namespace {

// A table cell: a `|`, even inside a code span, would end the cell.
std::string cell(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string code(std::string_view text) { return "`" + cell(text) + "`"; }

}  // namespace

int main() {
  using divsim::schema::type_name;
  std::cout << "## Root attributes\n\n"
               "| attribute | type | written | meaning |\n"
               "|---|---|---|---|\n";
  for (const auto& a : divsim::schema::attributes())
    if (a.root())
      std::cout << "| " << code(a.name) << " | " << type_name(a.type) << " | " << cell(a.written) << " | "
                << cell(a.description) << " |\n";

  std::cout << "\n## Datasets\n\n"
               "| path | shape | dims | type | written | meaning |\n"
               "|---|---|---|---|---|---|\n";
  for (const auto& d : divsim::schema::datasets())
    std::cout << "| " << code(d.path) << " | " << cell(d.shape) << " | "
              << (d.dims.empty() ? "per dataset" : code(d.dims)) << " | " << type_name(d.type) << " | "
              << cell(d.written) << " | " << cell(d.description) << " |\n";

  std::cout << "\n## Dataset attributes\n\n"
               "| attribute | on | type | meaning |\n"
               "|---|---|---|---|\n";
  for (const auto& a : divsim::schema::attributes())
    if (!a.root())
      std::cout << "| " << code(a.name) << " | " << cell(a.on) << " | " << type_name(a.type) << " | "
                << cell(a.description) << " |\n";
  return 0;
}
