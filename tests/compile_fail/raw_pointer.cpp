// SPDX-License-Identifier: BSL-1.0
// Raw pointers have no encoding (an address means nothing in another process).
// expect-error: cannot be serialized
// expect-error: NotSerializable = const char ?\*|has_an_encoding<const char ?\*>
#include <fiber/serialize.hpp>

struct message {
  int id;
  const char* text;
};

int main() {
  fiber::writer w;
  w.write(message{1, "hi"});
  return static_cast<int>(w.size());
}
