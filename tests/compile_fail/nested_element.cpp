// SPDX-License-Identifier: BSL-1.0
// The culprit is deep inside an aggregate's container member: the message
// names it (not the outer type) and nothing else is reported.
// expect-error: cannot be serialized
// expect-error: NotSerializable = app::handle|has_an_encoding<app::handle>
#include <fiber/serialize.hpp>

#include <map>
#include <string>
#include <vector>

namespace app {
class handle {
public:
  handle() = default;
  handle(const handle&) = default;

private:
  int fd_ = -1;
};

struct registry {
  int version;
  std::map<std::string, std::vector<handle>> handles;
};
} // namespace app

int main() {
  const std::vector<std::byte> bytes;
  return fiber::deserialize<app::registry>(bytes).version;
}
