//===- Json.cpp - JSON text helpers -----------------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Json.h"

#include "shoal/Runtime/Error.h"

#include <fmt/format.h>

#include <cctype>
#include <cstring>
#include <string_view>

using namespace shoal::rt;

std::string shoal::rt::jsonString(const std::string &text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      out += {'\\', c};
    else if (static_cast<unsigned char>(c) < 0x20)
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
    else
      out += c;
  }
  return out + "\"";
}

const JsonValue *JsonValue::find(const std::string &key) const {
  for (const auto &m : members)
    if (m.first == key)
      return &m.second;
  return nullptr;
}

namespace {

class JsonParser {
public:
  JsonParser(const char *data, std::size_t size, const std::string &what)
      : text(data, size), what(what) {}

  JsonValue parse() {
    JsonValue v = value(0);
    space();
    if (pos != text.size())
      fail("unexpected text after the JSON value");
    return v;
  }

private:
  [[noreturn]] void fail(const std::string &why) const {
    throw Error(fmt::format("{}: {} at byte {}", what, why, pos));
  }
  void space() {
    while (pos < text.size() && text[pos] && std::strchr(" \t\r\n", text[pos]))
      ++pos;
  }
  bool literal(const char *word) {
    std::size_t n = std::strlen(word);
    if (text.compare(pos, n, std::string_view(word, n)) != 0)
      return false;
    pos += n;
    return true;
  }
  JsonValue value(int depth) {
    if (depth > 64)
      fail("nesting too deep");
    space();
    if (pos >= text.size())
      fail("unexpected end");
    JsonValue v;
    char c = text[pos];
    if (c == '{') {
      v.kind = JsonValue::Object;
      ++pos;
      space();
      if (pos < text.size() && text[pos] == '}') {
        ++pos;
        return v;
      }
      while (true) {
        space();
        std::string key = string();
        space();
        if (pos >= text.size() || text[pos] != ':')
          fail("expected ':'");
        ++pos;
        v.members.emplace_back(std::move(key), value(depth + 1));
        space();
        if (pos < text.size() && text[pos] == ',') {
          ++pos;
          continue;
        }
        if (pos < text.size() && text[pos] == '}') {
          ++pos;
          return v;
        }
        fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      v.kind = JsonValue::Array;
      ++pos;
      space();
      if (pos < text.size() && text[pos] == ']') {
        ++pos;
        return v;
      }
      while (true) {
        v.items.push_back(value(depth + 1));
        space();
        if (pos < text.size() && text[pos] == ',') {
          ++pos;
          continue;
        }
        if (pos < text.size() && text[pos] == ']') {
          ++pos;
          return v;
        }
        fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v.kind = JsonValue::String;
      v.text = string();
      return v;
    }
    if (literal("true")) {
      v.kind = JsonValue::Bool;
      v.boolean = true;
      return v;
    }
    if (literal("false")) {
      v.kind = JsonValue::Bool;
      return v;
    }
    if (literal("null"))
      return v;
    if (c == '-' || (c >= '0' && c <= '9')) {
      std::size_t start = pos;
      ++pos;
      while (pos < text.size() && text[pos] &&
             std::strchr("0123456789.eE+-", text[pos]))
        ++pos;
      v.kind = JsonValue::Number;
      v.text = std::string(text.substr(start, pos - start));
      return v;
    }
    fail(fmt::format("unexpected character '{}'", c));
  }
  std::string string() {
    if (pos >= text.size() || text[pos] != '"')
      fail("expected a string");
    ++pos;
    std::string out;
    while (true) {
      if (pos >= text.size())
        fail("unterminated string");
      char c = text[pos++];
      if (c == '"')
        return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos >= text.size())
        fail("unterminated string");
      char e = text[pos++];
      switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        // Exactly four hex digits (std::stoul would take "+1", " 1" or
        // throw its own exception on "zz").
        unsigned code = 0;
        for (int i = 0; i < 4; ++i, ++pos) {
          char h = pos < text.size() ? text[pos] : '\0';
          if (!std::isxdigit(static_cast<unsigned char>(h)))
            fail("bad \\u escape (expected four hex digits)");
          code = code * 16 + (std::isdigit(static_cast<unsigned char>(h))
                                  ? h - '0'
                                  : std::tolower(h) - 'a' + 10);
        }
        // Names are ASCII in practice; encode the code point as UTF-8.
        if (code < 0x80) {
          out += static_cast<char>(code);
        } else if (code < 0x800) {
          out += static_cast<char>(0xc0 | (code >> 6));
          out += static_cast<char>(0x80 | (code & 0x3f));
        } else {
          out += static_cast<char>(0xe0 | (code >> 12));
          out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
          out += static_cast<char>(0x80 | (code & 0x3f));
        }
        break;
      }
      default:
        fail(fmt::format("bad escape '\\{}'", e));
      }
    }
  }

  std::string_view text;
  std::string what;
  std::size_t pos = 0;
};

} // namespace

JsonValue shoal::rt::parseJson(const char *data, std::size_t size,
                               const std::string &what) {
  return JsonParser(data, size, what).parse();
}
