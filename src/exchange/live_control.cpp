#include "exchange/live_control.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include "common/error.h"

namespace gradbox::exchange {
namespace {

// The allowed interval of a value; an open end excludes the bound itself.
struct Bounds {
  double lo, hi;
  bool lo_open = false, hi_open = false;
  bool contain(double v) const { return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi); }
  std::string text() const;
};

// Shortest text that reads back as the same value: 0.1 -> "0.1", 1.0 -> "1".
std::string format_number(double v) {
  char buf[64];
#if defined(__cpp_lib_to_chars)
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : str(v);
#else  // GCC 10 (Debian 11) has no floating-point to_chars: the fewest digits that read back
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
#endif
}
std::string format_number(int64_t v) { return std::to_string(v); }

std::string Bounds::text() const {
  return str(lo_open ? "(" : "[", format_number(lo), ", ", format_number(hi), hi_open ? ")" : "]");
}

// Every key, in the order describe() and error messages use. One table, so a new key cannot be
// parsed but forgotten in to_json or describe.
template <class F>
void for_each_field(F&& f) {
  f("micro_batch", &LiveControl::micro_batch, Bounds{1, 65536});
  f("grad_accum", &LiveControl::grad_accum, Bounds{1, LiveControl::kMaxGradAccum});
  f("lr_multiplier", &LiveControl::lr_multiplier, Bounds{0, 100, /*lo_open=*/true});
  f("weight_decay", &LiveControl::weight_decay, Bounds{0, 10});
  f("dropout", &LiveControl::dropout, Bounds{0, 1, false, /*hi_open=*/true});
}

std::string known_keys() {
  std::string out;
  for_each_field([&](const char* key, auto, const Bounds&) { out += out.empty() ? key : str(", ", key); });
  return out;
}

template <class T>
T read_value(const nlohmann::json& v, const std::string& origin, const char* key, const Bounds& bounds) {
  if constexpr (std::is_same_v<T, int64_t>) {
    GB_REQUIRE(v.is_number_integer(), origin, ": ", key, " must be an integer in ", bounds.text(), ", got ", v.dump());
    // A huge unsigned value would wrap to a small int64_t.
    bool huge = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max());
    GB_REQUIRE(!huge && bounds.contain(double(v.get<int64_t>())), origin, ": ", key, " must be in ", bounds.text(),
               ", got ", v.dump());
    return v.get<int64_t>();
  } else {
    GB_REQUIRE(v.is_number(), origin, ": ", key, " must be a number in ", bounds.text(), ", got ", v.dump());
    GB_REQUIRE(bounds.contain(v.get<double>()), origin, ": ", key, " must be in ", bounds.text(), ", got ", v.dump());
    return v.get<double>();
  }
}

}  // namespace

bool LiveControl::empty() const { return *this == LiveControl{}; }

nlohmann::json LiveControl::to_json() const {
  nlohmann::json j = nlohmann::json::object();  // std::map underneath: keys come out sorted
  for_each_field([&](const char* key, auto member, const Bounds&) {
    if (const auto& v = this->*member) j[key] = *v;
  });
  return j;
}

LiveControl LiveControl::from_json(const nlohmann::json& j, const std::string& origin) {
  GB_REQUIRE(j.is_object(), origin, ": expected a JSON object of settings (", known_keys(), "), got ", j.dump());
  LiveControl c;
  for (const auto& item : j.items()) {
    bool known = false;
    for_each_field([&](const char* key, auto member, const Bounds& bounds) {
      if (item.key() != key) return;
      known = true;
      using T = typename std::remove_reference_t<decltype(c.*member)>::value_type;
      c.*member = read_value<T>(item.value(), origin, key, bounds);
    });
    GB_REQUIRE(known, origin, ": unknown key '", item.key(), "' (known: ", known_keys(), ")");
  }
  return c;
}

LiveControl LiveControl::parse(const std::string& text, const std::string& origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // a syntax error, or a number past a double's range
    throw InputError(str(origin, ": not valid JSON (", e.what(), ")"));
  }
  return from_json(j, origin);
}

std::string LiveControl::describe() const {
  std::string out;
  for_each_field([&](const char* key, auto member, const Bounds&) {
    if (const auto& v = this->*member) out += str(out.empty() ? "" : ", ", key, " ", format_number(*v));
  });
  return out.empty() ? "nothing set" : out;
}

std::string describe_change(const LiveControl& before, const LiveControl& after) {
  std::string out;
  for_each_field([&](const char* key, auto member, const Bounds&) {
    const auto &b = before.*member, &a = after.*member;
    if (b == a) return;
    auto text = [](const auto& v) { return v ? format_number(*v) : std::string("(flag)"); };
    out += str(out.empty() ? "" : ", ", key, " ", text(b), " -> ", text(a));
  });
  return out.empty() ? "no change" : out;
}

}  // namespace gradbox::exchange
