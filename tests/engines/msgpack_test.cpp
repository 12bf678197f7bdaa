// Tests of engines/msgpack: every encoding of every type, limits, and
// hostile input that must fail cleanly.
#include "engines/msgpack.hpp"

#include <gtest/gtest.h>

#include <random>

#include "msgpack_writer.hpp"

namespace kvmesh::msgpack {
namespace {

using test::from_hex;
using test::mp_writer;

expected<value> parse_bytes(const std::vector<uint8_t>& b) {
  return parse(b.data(), b.size());
}

TEST(msgpack, integers_in_every_width) {
  for (uint64_t v :
       {0ull, 1ull, 127ull, 128ull, 255ull, 256ull, 65535ull, 65536ull,
        4294967295ull, 4294967296ull, 18446744073709551615ull}) {
    mp_writer w;
    w.uint(v);
    auto x = parse_bytes(w.bytes());
    ASSERT_TRUE(x) << v << ": " << x.err().message;
    EXPECT_TRUE(x->is(type::uint));
    EXPECT_EQ(x->u, v);
  }
  for (int64_t v :
       {-1ll, -32ll, -33ll, -128ll, -129ll, -32768ll, -32769ll, -2147483648ll,
        -2147483649ll, static_cast<long long>(INT64_MIN)}) {
    mp_writer w;
    w.sint(v);
    auto x = parse_bytes(w.bytes());
    ASSERT_TRUE(x) << v << ": " << x.err().message;
    EXPECT_TRUE(x->is(type::sint));
    EXPECT_EQ(x->i, v);
  }
  // A signed encoding of a non-negative number reads as unsigned.
  auto x = parse_bytes(from_hex("d3000000000000002a"));
  ASSERT_TRUE(x);
  EXPECT_TRUE(x->is(type::uint));
  EXPECT_EQ(x->u, 42u);
}

TEST(msgpack, floats_strings_bytes_and_containers) {
  auto f32 = parse_bytes(from_hex("ca3fc00000"));  // 1.5 as float 32
  ASSERT_TRUE(f32);
  EXPECT_EQ(f32->f, 1.5);
  mp_writer w;
  w.map(3)
      .str("a")
      .f64(-2.25)
      .str(std::string(40, 'x'))
      .bin("\x01\x02")
      .str("l")
      .array(3)
      .nil()
      .boolean(true)
      .boolean(false);
  auto m = parse_bytes(w.bytes());
  ASSERT_TRUE(m) << m.err().message;
  ASSERT_TRUE(m->is(type::map));
  EXPECT_EQ(m->size(), 3u);
  ASSERT_NE(m->find("a"), nullptr);
  EXPECT_EQ(m->find("a")->f, -2.25);
  const value* b = m->find(std::string(40, 'x'));
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->is(type::bin));
  EXPECT_EQ(b->raw, std::string_view("\x01\x02", 2));
  const value* l = m->find("l");
  ASSERT_NE(l, nullptr);
  ASSERT_EQ(l->items.size(), 3u);
  EXPECT_TRUE(l->items[0].is(type::nil));
  EXPECT_TRUE(l->items[1].b);
  EXPECT_FALSE(l->items[2].b);
  EXPECT_EQ(m->find("missing"), nullptr);
  // Extensions are skipped as opaque data (fixext 1 and ext 8).
  auto e = parse_bytes(from_hex("92d40105c7020701ff"));
  ASSERT_TRUE(e) << e.err().message;
  EXPECT_TRUE(e->items[0].is(type::ext));
  EXPECT_EQ(e->items[1].raw.size(), 2u);
}

TEST(msgpack, long_forms_of_strings_and_containers) {
  mp_writer w;
  w.array(20);
  for (int i = 0; i < 20; ++i)
    w.str(std::string(300, 'a'));
  auto x = parse_bytes(w.bytes());
  ASSERT_TRUE(x) << x.err().message;
  EXPECT_EQ(x->items.size(), 20u);
  EXPECT_EQ(x->items[19].raw.size(), 300u);
}

TEST(msgpack, refuses_what_is_not_one_value) {
  for (const char* hex : {
           "",              // nothing
           "c1",            // the never-used type byte
           "92",            // an array missing its elements
           "dc0003",        // array 16 of 3, missing them
           "dd7fffffff",    // a huge count with nothing behind it
           "df7fffffff",    // the same for a map
           "a5616263",      // a string shorter than its length
           "c6ffffffff00",  // bin 32 longer than the input
           "cb3ff8",        // a truncated float
           "0101",          // trailing bytes after one value
       }) {
    auto b = from_hex(hex);
    auto x = parse(b.data(), b.size());
    EXPECT_FALSE(x) << hex;
    if (!x) {
      EXPECT_EQ(x.err().code, ec::parse_error) << hex;
    }
  }
}

TEST(msgpack, nesting_is_bounded) {
  std::vector<uint8_t> deep(100000, 0x91);  // [[[[...]]]]
  deep.push_back(0xc0);
  auto x = parse(deep.data(), deep.size());
  ASSERT_FALSE(x);
  EXPECT_NE(x.err().message.find("nesting"), std::string::npos);
  std::vector<uint8_t> ok(10, 0x91);
  ok.push_back(0xc0);
  EXPECT_TRUE(parse(ok.data(), ok.size()));
}

TEST(msgpack, value_counts_are_bounded_before_allocating) {
  mp_writer w;
  w.array(100);
  for (int i = 0; i < 100; ++i)
    w.nil();
  limits few;
  few.max_values = 50;
  auto x = parse(w.bytes().data(), w.bytes().size(), few);
  ASSERT_FALSE(x);
  EXPECT_NE(x.err().message.find("too many values"), std::string::npos);
  EXPECT_TRUE(parse(w.bytes().data(), w.bytes().size()));
}

TEST(msgpack, random_bytes_never_crash) {
  std::mt19937_64 rng(7);
  size_t parsed = 0;
  for (int round = 0; round < 20000; ++round) {
    std::vector<uint8_t> b(rng() % 64);
    for (auto& c : b)
      c = static_cast<uint8_t>(rng());
    parsed += parse(b.data(), b.size()) ? 1 : 0;
  }
  // Some random inputs are valid values (a lone fixint); most are not.
  EXPECT_LT(parsed, 20000u);
}

}  // namespace
}  // namespace kvmesh::msgpack
