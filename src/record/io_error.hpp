#pragma once
// IoError: a runtime problem with a file (cannot create, write, flush or rename it), as opposed to a
// usage or configuration error. main() maps it to exit code 3. It carries only a message that names
// the file and the problem; it does not classify errors further.
#include <stdexcept>

namespace divsim {

class IoError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace divsim
