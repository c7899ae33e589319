//===- Npy.cpp - Reading and writing NumPy .npy files -----------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//

#include "Npy.h"

#include "Half.h"
#include "MappedFile.h"

#include "shoal/Support/Files.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

using namespace shoal::rt;

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the runtime reads and writes little-endian data in place");

namespace {

const char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicLen = 6;

/// A tiny parser for the Python dict literal of a .npy header, e.g.
/// `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`.
class HeaderParser {
public:
  HeaderParser(const std::string &text, const std::string &path)
      : text(text), path(path) {}

  void parse(std::string &descr, bool &fortran, Shape &shape) {
    bool haveDescr = false, haveFortran = false, haveShape = false;
    skipSpace();
    expect('{');
    while (true) {
      skipSpace();
      if (peek() == '}')
        break;
      std::string key = parseString();
      skipSpace();
      expect(':');
      skipSpace();
      if (key == "descr") {
        descr = parseString();
        haveDescr = true;
      } else if (key == "fortran_order") {
        fortran = parseBool();
        haveFortran = true;
      } else if (key == "shape") {
        shape = parseTuple();
        haveShape = true;
      } else {
        fail(fmt::format("unexpected key '{}'", key));
      }
      skipSpace();
      if (peek() == ',') {
        ++pos;
        continue;
      }
      skipSpace();
      if (peek() != '}')
        fail("expected ',' or '}'");
    }
    if (!haveDescr || !haveFortran || !haveShape)
      fail("it lacks one of 'descr', 'fortran_order' and 'shape'");
  }

private:
  [[noreturn]] void fail(const std::string &why) const {
    throw Error(
        fmt::format("{}: malformed .npy header ({}): {}", path, why, text));
  }
  char peek() const { return pos < text.size() ? text[pos] : '\0'; }
  void skipSpace() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t' ||
                                 text[pos] == '\n' || text[pos] == '\r'))
      ++pos;
  }
  void expect(char c) {
    if (peek() != c)
      fail(fmt::format("expected '{}'", c));
    ++pos;
  }
  std::string parseString() {
    char quote = peek();
    if (quote != '\'' && quote != '"')
      fail("expected a quoted string");
    ++pos;
    std::size_t end = text.find(quote, pos);
    if (end == std::string::npos)
      fail("unterminated string");
    std::string s = text.substr(pos, end - pos);
    pos = end + 1;
    return s;
  }
  bool parseBool() {
    if (text.compare(pos, 4, "True") == 0) {
      pos += 4;
      return true;
    }
    if (text.compare(pos, 5, "False") == 0) {
      pos += 5;
      return false;
    }
    fail("expected True or False");
  }
  Shape parseTuple() {
    Shape shape;
    expect('(');
    while (true) {
      skipSpace();
      if (peek() == ')') {
        ++pos;
        return shape;
      }
      if (peek() < '0' || peek() > '9')
        fail("expected a non-negative integer in the shape");
      int64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (v > (INT64_MAX - 9) / 10)
          fail("dimension too large");
        v = v * 10 + (peek() - '0');
        ++pos;
      }
      if (peek() == 'L') // Python 2 long
        ++pos;
      shape.push_back(v);
      skipSpace();
      if (peek() == ',')
        ++pos;
      else if (peek() != ')')
        fail("expected ',' or ')' in the shape");
    }
  }

  const std::string &text;
  const std::string &path;
  std::size_t pos = 0;
};

/// Maps a numpy type string to a DType. `<V2` (two raw bytes, how numpy
/// saves ml_dtypes' bfloat16) is read as bf16 bits.
DType parseDescr(const std::string &descr, const std::string &path) {
  auto unsupported = [&](const char *why) -> Error {
    return Error(fmt::format(
        "{}: {} '{}' (supported: float32 '<f4', float64 '<f8', float16 "
        "'<f2', bfloat16 as '<V2' bits, int64 '<i8', int32 '<i4', int8 "
        "'|i1', uint8 '|u1', bool '|b1')",
        path, why, descr));
  };
  if (descr.size() < 3)
    throw unsupported("unsupported dtype");
  char order = descr[0];
  std::string kind = descr.substr(1);
  bool oneByte = kind == "b1" || kind == "u1" || kind == "i1";
  if (order == '>' && !oneByte)
    throw unsupported("big-endian data is not supported, dtype");
  if (order != '<' && order != '|' && order != '=' && order != '>')
    throw unsupported("unsupported dtype");
  if (kind == "f4" && order != '|')
    return DType::F32;
  if (kind == "f8" && order != '|')
    return DType::F64;
  if (kind == "f2" && order != '|')
    return DType::F16;
  if (kind == "V2")
    return DType::BF16;
  if (kind == "i8" && order != '|')
    return DType::I64;
  if (kind == "i4" && order != '|')
    return DType::I32;
  if (kind == "i1")
    return DType::I8;
  if (kind == "u1")
    return DType::U8;
  if (kind == "b1")
    return DType::Bool;
  throw unsupported("unsupported dtype");
}

/// The numpy type string a tensor of `dtype` is written with (bf16 is
/// written as float32).
const char *descrOf(DType dtype) {
  switch (dtype) {
  case DType::F32:
  case DType::BF16:
    return "<f4";
  case DType::F64:
    return "<f8";
  case DType::F16:
    return "<f2";
  case DType::I64:
    return "<i8";
  case DType::I32:
    return "<i4";
  case DType::I8:
    return "|i1";
  case DType::U8:
    return "|u1";
  case DType::Bool:
    return "|b1";
  }
  return "?";
}

} // namespace

NpyHeader shoal::rt::parseNpyHeader(const uint8_t *data, std::size_t size,
                                    const std::string &path) {
  if (size < 10 || std::memcmp(data, kMagic, kMagicLen) != 0)
    throw Error(
        fmt::format("{}: not a .npy file (bad magic or too short)", path));
  int major = data[6];
  std::size_t headerLen, headerStart;
  if (major == 1) {
    headerLen = data[8] | (std::size_t(data[9]) << 8);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12)
      throw Error(fmt::format("{}: truncated .npy header", path));
    headerLen = data[8] | (std::size_t(data[9]) << 8) |
                (std::size_t(data[10]) << 16) | (std::size_t(data[11]) << 24);
    headerStart = 12;
  } else {
    throw Error(fmt::format(
        "{}: unsupported .npy format version {}.{} (supported: 1.0, 2.0)", path,
        major, int(data[7])));
  }
  if (headerLen > size - headerStart)
    throw Error(fmt::format("{}: truncated .npy header ({} bytes announced, "
                            "{} in the file)",
                            path, headerLen, size - headerStart));
  std::string text(reinterpret_cast<const char *>(data + headerStart),
                   headerLen);
  std::string descr;
  bool fortran = false;
  Shape shape;
  HeaderParser(text, path).parse(descr, fortran, shape);
  NpyHeader header;
  header.type.dtype = parseDescr(descr, path);
  if (fortran)
    throw Error(fmt::format("{}: Fortran-order arrays are not supported; "
                            "save a C-order array (numpy.ascontiguousarray)",
                            path));
  header.type.shape = shape;
  header.dataOffset = headerStart + headerLen;
  // Overflow-checked size of the data.
  uint64_t bytes = 0;
  if (!checkedByteSize(header.type.dtype, shape, bytes))
    throw Error(
        fmt::format("{}: shape {} is too large", path, formatShape(shape)));
  std::size_t available = size - header.dataOffset;
  if (available < bytes)
    throw Error(fmt::format("{}: truncated .npy file: a {} array needs {} "
                            "data bytes, the file has {}",
                            path, header.type.str(), bytes, available));
  if (available > bytes)
    throw Error(fmt::format("{}: {} unexpected bytes after the data of a {} "
                            "array",
                            path, available - bytes, header.type.str()));
  return header;
}

Tensor shoal::rt::readNpy(const std::string &path) {
  MappedFile file(path, "input file");
  NpyHeader header = parseNpyHeader(file.data(), file.size(), path);
  Tensor t(header.type);
  if (t.numBytes())
    std::memcpy(t.rawData(), file.data() + header.dataOffset, t.numBytes());
  if (header.type.dtype == DType::Bool) {
    uint8_t *b = t.data<uint8_t>();
    for (int64_t i = 0, e = t.numElements(); i < e; ++i)
      b[i] = b[i] != 0;
  }
  return t;
}

bool shoal::rt::npyFeeds(const TensorType &file, const TensorType &want) {
  return file == want || (want.dtype == DType::BF16 &&
                          file == TensorType{DType::F32, want.shape});
}

Tensor shoal::rt::convertNpyData(const uint8_t *data, const TensorType &file,
                                 DType want) {
  if (file.dtype != DType::F32 || want != DType::BF16)
    throw Error(fmt::format("internal error: no .npy conversion from {} to {}",
                            dtypeName(file.dtype), dtypeName(want)));
  Tensor t(want, file.shape);
  uint16_t *dst = t.data<uint16_t>();
  for (int64_t i = 0, n = t.numElements(); i < n; ++i) {
    float v;
    std::memcpy(&v, data + i * sizeof(float), sizeof v);
    dst[i] = floatToBF16(v);
  }
  return t;
}

void shoal::rt::writeNpy(const std::string &path, const Tensor &tensor) {
  if (tensor.dtype() == DType::BF16) {
    // numpy has no bfloat16: write the (exact) float32 values.
    Tensor f(DType::F32, tensor.shape());
    const uint16_t *src = tensor.data<uint16_t>();
    float *dst = f.data<float>();
    for (int64_t i = 0, n = f.numElements(); i < n; ++i)
      dst[i] = bf16ToFloat(src[i]);
    writeNpy(path, f);
    return;
  }
  std::string shape;
  const Shape &dims = tensor.shape();
  if (dims.size() == 1)
    shape = fmt::format("({},)", dims[0]);
  else
    shape = fmt::format("({})", fmt::join(dims, ", "));
  std::string dict =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                  descrOf(tensor.dtype()), shape);
  // Pad with spaces and a final newline so that the data starts on a
  // multiple of 64 bytes, as numpy does.
  std::size_t prefix = 10;
  std::size_t total = prefix + dict.size() + 1;
  if ((total + 63) / 64 * 64 - prefix > 65535) {
    prefix = 12;
    total = prefix + dict.size() + 1;
  }
  std::size_t padded = (total + 63) / 64 * 64;
  std::string header = dict + std::string(padded - total, ' ') + "\n";
  std::string out(kMagic, kMagicLen);
  std::size_t len = header.size();
  if (prefix == 10) {
    out += '\x01';
    out += '\x00';
    out += static_cast<char>(len & 0xff);
    out += static_cast<char>((len >> 8) & 0xff);
  } else {
    out += '\x02';
    out += '\x00';
    for (int i = 0; i < 4; ++i)
      out += static_cast<char>((len >> (8 * i)) & 0xff);
  }
  out += header;

  // Written aside and renamed into place: a symlink at `path` is replaced,
  // not written through.
  shoal::AtomicFile f(path);
  f.write(out);
  if (tensor.numBytes())
    f.write(tensor.rawData(), tensor.numBytes());
  if (!f.commit())
    throw Error(fmt::format("cannot write {}", f.error()));
}

std::string shoal::rt::sanitizeName(const std::string &name) {
  std::string s = name;
  for (char &c : s) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok)
      c = '_';
  }
  return s;
}
