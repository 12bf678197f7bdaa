// Tests of the chat template renderer: each construct against what Python's
// Jinja2 renders (transformers' environment: trim_blocks, lstrip_blocks,
// its tojson, raise_exception, strftime_now, loop controls; expectations
// computed with Jinja2 3.1.6), the refusals at parse with their line, and
// the bounds on hostile templates and inputs.
#include "tokens/chat_template.hpp"

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <string>

#include <gtest/gtest.h>

namespace kvmesh {
namespace {

using ojson = nlohmann::ordered_json;

// 2024-07-26 09:30:00 UTC, read as local time: the tests run with TZ=UTC.
chat_template_render_options fixed_clock() {
  chat_template_render_options o;
  o.now =
      std::chrono::system_clock::time_point(std::chrono::seconds(1721986200));
  return o;
}

expected<std::string> render(
    const std::string& source, const ojson& ctx,
    const chat_template_render_options& opt = fixed_clock()) {
  auto t = chat_template::parse(source);
  if (!t) return t.err();
  return t->render(ctx, opt);
}

std::string parse_error(const std::string& source) {
  auto t = chat_template::parse(source);
  return t ? std::string("(parsed)") : t.err().message;
}

struct python_case {
  const char* name;
  const char* source;
  const char* context;
  const char* want;  // null: Python raises
};

// Rendered by Python's Jinja2 in transformers' environment.
const python_case kCases[] =
    {
        {"text", R"~~(hello)~~", R"~~({})~~", R"~~(hello)~~"},
        {"output",
         R"~~({{ 'a' + b }}|{{ n }}|{{ x }}|{{ none }}|{{ true }}|{{ 2.5 }}|{{ 1.0 }}|{{ 1e20 }}|{{ 0.0001 }}|{{ 1e-5 }})~~",
         R"~~({"b": "B", "n": 42, "x": null})~~",
         R"~~(aB|42|None|None|True|2.5|1.0|1e+20|0.0001|1e-05)~~"},
        {"undefined_prints_empty",
         R"~~([{{ nothing }}][{{ nothing ~ 'x' }}][{{ d.missing }}])~~",
         R"~~({"d": {}})~~", R"~~([][x][])~~"},
        {"if_elif_else",
         R"~~({% for v in [0, 1, 2] %}{% if v == 0 %}zero{% elif v == 1 %}one{% else %}many{% endif %};{% endfor %})~~",
         R"~~({})~~", R"~~(zero;one;many;)~~"},
        {"for_loop_fields",
         R"~~({% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem.role if not loop.first }}{{ loop.nextitem.role if not loop.last }}|{% endfor %})~~",
         R"~~({"messages": [{"role": "system", "content": "  sys  "}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo\n"}, {"role": "user", "content": "bye"}]})~~",
         R"~~(1043TrueFalse4user|2132FalseFalse4systemassistant|3221FalseFalse4useruser|4310FalseTrue4assistant|)~~"},
        {"for_else_and_filter",
         R"~~({% for m in messages if m.role == 'user' %}{{ m.content }}{% else %}none{% endfor %}/{% for x in [] %}x{% else %}empty{% endfor %})~~",
         R"~~({"messages": [{"role": "system", "content": "  sys  "}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo\n"}, {"role": "user", "content": "bye"}]})~~",
         R"~~(hibye/empty)~~"},
        {"for_dict_items_and_keys",
         R"~~({% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for v in d.values() %}{{ v }}{% endfor %})~~",
         R"~~({"d": {"b": 1, "a": 2, "c": 3}})~~", R"~~(b=1;a=2;c=3;bac123)~~"},
        {"items_method_wins_over_key",
         R"~~({% for k, v in d.items() %}{{ k }};{% endfor %}{{ d['items'] }})~~",
         R"~~({"d": {"items": "key", "z": 1}})~~", R"~~(items;z;key)~~"},
        {"set_and_scopes",
         R"~~({% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 10 %}{{ x }}{% endfor %}{{ x }})~~",
         R"~~({})~~", R"~~(1111111)~~"},
        {"namespace",
         R"~~({% set ns = namespace(total=0, names='') %}{% for m in messages %}{% set ns.total = ns.total + 1 %}{% set ns.names = ns.names ~ m.role[0] %}{% endfor %}{{ ns.total }} {{ ns.names }})~~",
         R"~~({"messages": [{"role": "system", "content": "  sys  "}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo\n"}, {"role": "user", "content": "bye"}]})~~",
         R"~~(4 suau)~~"},
        {"set_block",
         R"~~({% set greeting %}Hello {{ name }}!{% endset %}[{{ greeting }}])~~",
         R"~~({"name": "Ana"})~~", R"~~([Hello Ana!])~~"},
        {"whitespace_control", R"~~(a  {{- ' b ' -}}  c
  {%- if true -%}  d  {%- endif -%}  e {# c #} f {#- c -#} g)~~",
         R"~~({})~~", R"~~(a b cde  fg)~~"},
        {"trim_and_lstrip_blocks", R"~~(<ul>
    {% for x in xs %}
    <li>{{ x }}</li>
    {% endfor %}
</ul>
)~~",
         R"~~({"xs": ["a", "b"]})~~",
         R"~~(<ul>
    <li>a</li>
    <li>b</li>
</ul>)~~"},
        {"lstrip_keeps_expression_indent", R"~~(x
    {{ 'y' }}
  {% if true %}
z
  {%+ if true %}
w{% endif %}{% endif %}
)~~",
         R"~~({})~~",
         R"~~(x
    y
z
  w)~~"},
        {"trailing_newline_dropped", R"~~(line

)~~",
         R"~~({})~~",
         R"~~(line
)~~"},
        {"comment_lstrip", R"~~(a
   {# note #}
b)~~",
         R"~~({})~~",
         R"~~(a
b)~~"},
        {"plus_disables_trim", R"~~({% if true +%}
kept{% endif %})~~",
         R"~~({})~~",
         R"~~(
kept)~~"},
        {"concat",
         R"~~({{ 'a' ~ 1 ~ none ~ true ~ [1, 'x'] }}|{{ 'a' + 'b' }}|{{ [1] + [2, 3] }}|{{ 'ab' * 3 }})~~",
         R"~~({})~~", R"~~(a1NoneTrue[1, 'x']|ab|[1, 2, 3]|ababab)~~"},
        {"arithmetic",
         R"~~({{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 10 / 4 }} {{ 4 / 2 }} {{ 1 + 2.5 }} {{ true + 1 }} {{ -(3) }})~~",
         R"~~({})~~", R"~~(3 -4 1 2 1024 0.5 2.5 2.0 3.5 2 -3)~~"},
        {"comparisons",
         R"~~({{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] == [1, 2] }} {{ {'a': 1} == {'a': 1} }} {{ 1 != 2 }} {{ none == none }} {{ 'x' == 1 }} {{ true == 1 }})~~",
         R"~~({})~~", R"~~(True True True True True True True False True)~~"},
        {"in_not_in",
         R"~~({{ 'a' in 'cat' }} {{ 'z' not in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in d }} {{ 'v' in d }} {{ 'x' in nothing }})~~",
         R"~~({"d": {"k": "v"}})~~", R"~~(True True True True False False)~~"},
        {"and_or_not",
         R"~~({{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 'z' }} {{ not [] }} {{ [] or {} or 'last' }})~~",
         R"~~({})~~", R"~~(x y  True last)~~"},
        {"ternary",
         R"~~({{ 'yes' if flag else 'no' }} {{ 'only' if not flag }}|{{ 'a' if false else 'b' if true else 'c' }})~~",
         R"~~({"flag": true})~~", R"~~(yes |b)~~"},
        {"tests",
         R"~~({{ x is defined }} {{ y is undefined }} {{ n is none }} {{ 's' is string }} {{ d is mapping }} {{ l is iterable }} {{ 1 is number }} {{ true is number }} {{ 1 is integer }} {{ 1.5 is float }} {{ true is boolean }} {{ l is sequence }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ n is sameas none }} {{ 2 is in l }} {{ 2 is eq 2 }} {{ 1 is lt 2 }} {{ none is not none }} {{ y is iterable }})~~",
         R"~~({"x": 1, "n": null, "d": {}, "l": [1, 2]})~~",
         R"~~(True True True True True True True True True True True True True True True True True True True True True False True)~~"},
        {"subscripts",
         R"~~({{ m[0]['role'] }} {{ m[-1].content }} {{ m.0.role }} {{ s[1] }} {{ s[-1] }} [{{ m[9] }}] {{ d['a-b'] }})~~",
         R"~~({"m": [{"role": "r", "content": "c"}, {"role": "r2", "content": "c2"}], "s": "héllo", "d": {"a-b": 5}})~~",
         R"~~(r c2 r é o [] 5)~~"},
        {"slices",
         R"~~({{ l[1:] }} {{ l[:2] }} {{ l[::-1] }} {{ l[-2:] }} {{ l[1:3:1] }} {{ s[1:4] }} {{ s[::-1] }} {{ s[:] }} {{ t[1:] }})~~",
         R"~~({"l": [1, 2, 3, 4], "s": "a😀bcd", "t": "x"})~~",
         R"~~([2, 3, 4] [1, 2] [4, 3, 2, 1] [3, 4] [2, 3] 😀bc dcb😀a a😀bcd )~~"},
        {"filter_trim", R"~~([{{ '  a b 	
' | trim }}][{{ none | trim }}][{{ 5 | trim }}][{{ nothing | trim }}][{{ 'xxaxx' | trim('x') }}][{{ s | trim }}])~~",
         R"~~({"s": "　 \u001c mid  "})~~",
         R"~~([a b][None][5][][a][mid])~~"},
        {"filter_to_json", R"~~({{ d | tojson }}
{{ d | tojson(indent=2) }}
{{ d | tojson(sort_keys=true) }}
{{ d | tojson(separators=(',', ':')) }}
{{ 'é"\\
' | tojson }}
{{ 'é😀' | tojson(ensure_ascii=true) }}
{{ [] | tojson(indent=2) }}{{ {} | tojson(indent=2) }}
{{ 1.0 | tojson }} {{ none | tojson }} {{ (1, 2) | tojson }})~~",
         R"~~({"d": {"z": [1, 2.5, null, true], "a": {"n": "ü"}, "e": []}})~~",
         R"~~({"z": [1, 2.5, null, true], "a": {"n": "ü"}, "e": []}
{
  "z": [
    1,
    2.5,
    null,
    true
  ],
  "a": {
    "n": "ü"
  },
  "e": []
}
{"a": {"n": "ü"}, "e": [], "z": [1, 2.5, null, true]}
{"z":[1,2.5,null,true],"a":{"n":"ü"},"e":[]}
"é\"\\\n\u0001"
"\u00e9\ud83d\ude00"
[]{}
1.0 null [1, 2])~~"},
        {"filter_to_json_positional_is_ensure_ascii",
         R"~~({{ 'é' | tojson(2) }})~~", R"~~({})~~", R"~~("\u00e9")~~"},
        {"filters_strings",
         R"~~({{ 'Ab' | upper }} {{ 'Ab' | lower }} {{ 'hello big-world (x)' | title }} {{ 'hELLO' | capitalize }} {{ 'aXa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 5 | string }} {{ [1] | string }} {{ 'abc' | length }} {{ 'é😀' | length }})~~", R"~~({})~~",
         R"~~(AB ab Hello Big-World (X) Hello bXb bba 5 [1] 3 2)~~"},
        {"filters_lists",
         R"~~({{ l | length }} {{ l | first }} {{ l | last }} {{ l | join(', ') }} {{ l | join }} {{ l | list }} {{ 'ab' | list }} {{ l | reverse | list }} {{ d | length }} {{ d | items | list }} {{ [3, 1, 3] | unique | list }})~~",
         R"~~({"l": [1, 2, 3], "d": {"a": 1}})~~",
         R"~~(3 1 3 1, 2, 3 123 [1, 2, 3] ['a', 'b'] [3, 2, 1] 1 [('a', 1)] [3, 1])~~"},
        {"filter_default",
         R"~~({{ nothing | default('dflt') }} {{ '' | default('e') }} {{ '' | default('e', true) }} {{ none | default('n') }} {{ x | d('y') }})~~",
         R"~~({"x": "set"})~~", R"~~(dflt  e None set)~~"},
        {"filter_int_float",
         R"~~({{ '42' | int }} {{ ' 7 ' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(5) }} {{ 3.9 | int }} {{ '1_000' | int }} {{ '2.5' | float }} {{ 3 | float }} {{ 'z' | float }} {{ -3 | abs }})~~",
         R"~~({})~~", R"~~(42 7 4 0 5 3 1000 2.5 3.0 0.0 3)~~"},
        {"select_reject_map",
         R"~~({{ m | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('+') }} {{ m | rejectattr('role', 'equalto', 'user') | list | length }} {{ m | map(attribute='missing', default='D') | join }} {{ [0, 1, '', 'a'] | select | list }} {{ [1, 2, 3, 4] | reject('odd') | list }} {{ ['a ', ' b'] | map('trim') | join }} {{ m | selectattr('role') | list | length }})~~",
         R"~~({"m": [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]})~~",
         R"~~(u1+u2 1 DDD [1, 'a'] [2, 4] ab 3)~~"},
        {"generator_is_truthy",
         R"~~({% if m | selectattr('role', 'equalto', 'nobody') %}truthy{% else %}falsy{% endif %} {% if m | selectattr('role', 'equalto', 'nobody') | list %}truthy{% else %}falsy{% endif %})~~",
         R"~~({"m": [{"role": "user"}]})~~", R"~~(truthy falsy)~~"},
        {"dictsort",
         R"~~({% for k, v in d | dictsort %}{{ k }}{{ v }}{% endfor %} {% for k, v in d | dictsort(reverse=true) %}{{ k }}{% endfor %} {% for k, v in d | dictsort(by='value') %}{{ k }}{% endfor %})~~",
         R"~~({"d": {"b": 2, "A": 3, "c": 1}})~~", R"~~(A3b2c1 cbA cbA)~~"},
        {"indent", R"~~({{ 'a
b

c' | indent }}|{{ 'a
b' | indent(2, true) }}|{{ 'a

b' | indent(width='> ', blank=true) }})~~",
         R"~~({})~~",
         R"~~(a
    b

    c|  a
  b|a
> 
> b)~~"},
        {"string_methods",
         R"~~({{ s.startswith('ab') }} {{ s.endswith(('x', 'yz')) }} [{{ p.strip() }}] [{{ p.lstrip() }}] [{{ p.rstrip() }}] {{ 'xxhixx'.strip('x') }} {{ 'a b  c'.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ ' a b '.split(none, 1) }} {{ 'ab'.upper() }} {{ 'AB'.lower() }} {{ 'hello wORLD'.title() }} {{ 'abc'.replace('b', 'X') }} {{ 'ab'.capitalize() }} {{ 'abc'.split() }} {{ 'x'.replace('', '-') }})~~",
         R"~~({"s": "abxyz", "p": "  pad \n"})~~",
         R"~~(True True [pad] [pad 
] [  pad] hi ['a', 'b', 'c'] ['a', 'b', '', 'c'] ['a', 'b,c'] ['a', 'b '] AB ab Hello World aXc Ab ['a', 'b', 'c'] -x-)~~"},
        {"dict_methods",
         R"~~({{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }})~~",
         R"~~({"d": {"a": 1, "b": [2]}})~~",
         R"~~(1 None dflt ['a', 'b'] [1, [2]] [('a', 1), ('b', [2])])~~"},
        {"repr",
         R"~~({{ l }} {{ d }} {{ t }} {{ ['it\'s', "q\"", 'both\'"', 'tab\t', 'é', '​', '\\'] }} {{ (1,) }} {{ [none, true, 1.5] }})~~",
         R"~~({"l": [1, "a"], "d": {"k": ["v", {"n": null}]}, "t": [1]})~~",
         R"~~([1, 'a'] {'k': ['v', {'n': None}]} [1] ["it's", 'q"', 'both\'"', 'tab\t', 'é', '\u200b', '\\'] (1,) [None, True, 1.5])~~"},
        {"string_literals",
         R"~~({{ 'a\nb' }}|{{ "q\"" }}|{{ '\x41\u00e9\U0001F600' }}|{{ '\d' }}|{{ 'adj' 'acent' }}|{{ '\101' }})~~",
         R"~~({})~~",
         R"~~(a
b|q"|Aé😀|\d|adjacent|A)~~"},
        {"range",
         R"~~({% for i in range(3) %}{{ i }}{% endfor %} {% for i in range(1, 10, 3) %}{{ i }}{% endfor %} {% for i in range(5, 0, -2) %}{{ i }}{% endfor %} {{ range(4) | list }} {{ range(3) | length }})~~",
         R"~~({})~~", R"~~(012 147 531 [0, 1, 2, 3] 3)~~"},
        {"dict_literal_and_globals",
         R"~~({{ {'a': 1, 'b': {'c': [1, 2]}} | tojson }} {{ dict(x=1, y='z') | tojson }} {% set n = namespace(d) %}{{ n.k }})~~",
         R"~~({"d": {"k": "from dict"}})~~",
         R"~~({"a": 1, "b": {"c": [1, 2]}} {"x": 1, "y": "z"} from dict)~~"},
        {"macros",
         R"~~({% macro tag(name, cls='c', close=true) -%}<{{ name }} class="{{ cls }}">{% if close %}</{{ name }}>{% endif %}{%- endmacro %}{{ tag('a') }}|{{ tag('b', 'x') }}|{{ tag('i', close=false) }}|{{ tag(name='p', cls=ns) }})~~", R"~~({"ns": "k"})~~",
         R"~~(<a class="c"></a>|<b class="x"></b>|<i class="c">|<p class="k"></p>)~~"},
        {"macro_recursion",
         R"~~({% macro count(n) %}{{ n }}{% if n > 0 %},{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(5) }})~~",
         R"~~({})~~", R"~~(5,4,3,2,1,0)~~"},
        {"break_continue_keep_output",
         R"~~({% for i in range(6) %}<{{ i }}{% if i is even %}e{% continue %}{% endif %}o{% if i == 3 %}B{% break %}{% endif %}>{% endfor %})~~",
         R"~~({})~~", R"~~(<0e<1o><2e<3oB)~~"},
        {"generation",
         R"~~({% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}|{% endfor %})~~",
         R"~~({"messages": [{"role": "system", "content": "  sys  "}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo\n"}, {"role": "user", "content": "bye"}]})~~",
         R"~~(  sys  |hi|yo
|bye|)~~"},
        {"strftime_now",
         R"~~({{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M %A %B %j %%') }})~~",
         R"~~({})~~", R"~~(26 Jul 2024 2024-07-26 09:30 Friday July 208 %)~~"},
        {"key_order_kept",
         R"~~({{ d | tojson }} {% for k in d %}{{ k }}{% endfor %})~~",
         R"~~({"d": {"zeta": 1, "alpha": 2, "mid": 3}})~~",
         R"~~({"zeta": 1, "alpha": 2, "mid": 3} zetaalphamid)~~"},
        {"nested_loops_and_loop_shadow",
         R"~~({% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }}{% endfor %}{{ loop.index }};{% endfor %})~~",
         R"~~({})~~", R"~~(11x21y1;12x22y2;)~~"},
        {"content_parts_loop",
         R"~~({% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'text' %}{{ p.text }}{% endif %}{% endfor %}{% endif %};{% endfor %})~~",
         R"~~({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]}, {"role": "user", "content": "plain"}]})~~",
         R"~~(ab;plain;)~~"},
        {"if_defined_set_at_top_level",
         R"~~({% if not x is defined %}{% set x = 'dflt' %}{% endif %}{{ x }})~~",
         R"~~({})~~", R"~~(dflt)~~"},
        {"raise_exception",
         R"~~({% if messages | length > 1 %}{{ raise_exception('Only one message, got ' ~ messages | length) }}{% endif %}ok)~~",
         R"~~({"messages": [{"role": "system", "content": "  sys  "}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo\n"}, {"role": "user", "content": "bye"}]})~~",
         nullptr},
        {"undefined_attribute_of_undefined", R"~~({{ nothing.attr }})~~",
         R"~~({})~~", nullptr},
        {"none_attribute_is_undefined", R"~~([{{ n.attr }}])~~",
         R"~~({"n": null})~~", R"~~([])~~"},
        {"str_plus_none", R"~~({{ 'a' + n }})~~", R"~~({"n": null})~~",
         nullptr},
        {"str_plus_int", R"~~({{ 'a' + 1 }})~~", R"~~({})~~", nullptr},
        {"undefined_plus", R"~~({{ missing + 'x' }})~~", R"~~({})~~", nullptr},
        {"division_by_zero", R"~~({{ 1 // 0 }})~~", R"~~({})~~", nullptr},
        {"length_of_generator", R"~~({{ m | selectattr('role') | length }})~~",
         R"~~({"m": [{"role": "user"}]})~~", nullptr},
        {"iterate_none", R"~~({% for x in n %}{% endfor %})~~",
         R"~~({"n": null})~~", nullptr},
        {"less_than_mixed", R"~~({{ 1 < 'a' }})~~", R"~~({})~~", nullptr},
        {"to_json_undefined", R"~~({{ nothing | tojson }})~~", R"~~({})~~",
         nullptr},
        {"set_attr_non_namespace", R"~~({% set d.x = 1 %})~~",
         R"~~({"d": {}})~~", nullptr},
};

class python_cases : public ::testing::TestWithParam<python_case> {};

TEST_P(python_cases, renders_as_python_jinja) {
  const python_case& c = GetParam();
  setenv("TZ", "UTC", 1);
  tzset();
  auto got = render(c.source, ojson::parse(c.context));
  if (c.want == nullptr) {
    EXPECT_FALSE(got) << "Python raises; kvmesh renders: " << *got;
    if (!got) {
      EXPECT_EQ(got.err().code, ec::invalid_argument) << got.err().message;
    }
  } else {
    ASSERT_TRUE(got) << got.err().message;
    EXPECT_EQ(*got, c.want);
  }
}

INSTANTIATE_TEST_SUITE_P(chat_template, python_cases,
                         ::testing::ValuesIn(kCases), [](const auto& info) {
                           return std::string(info.param.name);
                         });

TEST(chat_template, unsupported_filter_fails_at_parse_with_its_line) {
  EXPECT_EQ(parse_error("a\nb\n{{ x | wordcount }}"),
            "chat template line 3: filter 'wordcount' is not supported");
  auto t = chat_template::parse("{{ x | wordcount }}");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.err().code, ec::parse_error);
}

TEST(chat_template, other_unsupported_constructs_fail_at_parse) {
  EXPECT_EQ(parse_error("{% include 'x.jinja' %}"),
            "chat template line 1: tag 'include' is not supported");
  EXPECT_EQ(parse_error("\n{% if x is escaped %}{% endif %}"),
            "chat template line 2: test 'escaped' is not supported");
  EXPECT_EQ(parse_error("{{ s.zfill(3) }}"),
            "chat template line 1: method 'zfill' is not supported");
  EXPECT_EQ(parse_error("{{ lipsum(2) }}"),
            "chat template line 1: function 'lipsum' is not supported");
  EXPECT_EQ(
      parse_error(
          "{% for m in messages %}{{ loop.cycle('a', 'b') }}{% endfor %}"),
      "chat template line 1: method 'cycle' is not supported");
  EXPECT_EQ(parse_error("{% for m in messages recursive %}{% endfor %}"),
            "chat template line 1: recursive for loops are not supported");
  EXPECT_EQ(parse_error("{{ f(*args) }}"),
            "chat template line 1: '*' and '**' arguments are not supported");
  EXPECT_EQ(parse_error("{% macro m() %}{{ varargs }}{% endmacro %}"),
            "chat template line 1: a macro's 'varargs' is not supported");
  EXPECT_EQ(parse_error("{{ x | safe | trim }}"),
            "chat template line 1: filter 'safe' is only supported as the last "
            "filter of a {{ }}");
  EXPECT_EQ(parse_error("{% break %}"),
            "chat template line 1: 'break' outside of a for loop");
  EXPECT_EQ(parse_error("{{ '\\N{BULLET}' }}"),
            "chat template line 1: the \\N{...} escape is not supported");
}

TEST(chat_template, syntax_errors_name_their_line) {
  EXPECT_EQ(
      parse_error("{% if x %}\nno end"),
      "chat template line 2: unexpected end of template, expected 'endif'");
  EXPECT_EQ(parse_error("ok\n{{ x "),
            "chat template line 2: unexpected end of template, the '{{' tag is "
            "not closed");
  EXPECT_EQ(parse_error("{{ (x ] }}"),
            "chat template line 1: unexpected ']', expected ')'");
  EXPECT_EQ(parse_error("{# never closed"),
            "chat template line 1: missing end of comment tag");
  EXPECT_EQ(parse_error("{% endfor %}"),
            "chat template line 1: unexpected tag 'endfor'");
  EXPECT_EQ(parse_error("{{ x is defined(1) }}"),
            "chat template line 1: test 'defined' takes no argument");
}

// What parse cannot see (it depends on the values) refuses at render, with
// its name, rather than rendering something approximate; as parse_error,
// for Python would render it (a caller may ask Python instead).
TEST(chat_template, value_dependent_gaps_refuse_at_render) {
  auto refuses = [](const std::string& source, const char* ctx,
                    const std::string& what) {
    auto got = render(source, ojson::parse(ctx));
    ASSERT_FALSE(got) << source << " rendered " << *got;
    EXPECT_NE(got.err().message.find(what), std::string::npos)
        << got.err().message;
    EXPECT_EQ(got.err().code, ec::parse_error) << got.err().message;
  };
  refuses("{{ s | upper }}", R"({"s": "straße"})",
          "upper of non-ASCII text is not supported");
  refuses("{{ '%s!' % name }}", R"({"name": "x"})",
          "printf-style string formatting ('%') is not supported");
  refuses("{{ d.pop }}", R"({"d": {"pop": 1}})",
          "the dict method 'pop' is not supported");
  refuses("{{ s.zfill }}", R"({"s": "1"})",
          "the str method 'zfill' is not supported");
  refuses("{% for m in ms %}{{ loop.depth }}{% endfor %}", R"({"ms": [1]})",
          "loop.depth is not supported");
  refuses("{{ x is sameas 1 }}", R"({"x": 1})", "'sameas' on values");
  refuses("{{ 10 ** 40 }}", "{}", "integer overflow");
  refuses("{% set g = ms | select %}{{ g | list }}{{ g | list }}",
          R"({"ms": [1]})", "used twice is not supported");
}

TEST(chat_template, safe_as_the_last_filter_prints_the_text) {
  auto got = render("{{ '<b>' | safe }}", ojson::object());
  ASSERT_TRUE(got) << got.err().message;
  EXPECT_EQ(*got, "<b>");
}

TEST(chat_template, raise_exception_is_an_error_with_the_message) {
  auto got = render("line one\n{{ raise_exception('Roles must alternate') }}",
                    ojson::object());
  ASSERT_FALSE(got);
  EXPECT_EQ(got.err().code, ec::invalid_argument);
  EXPECT_EQ(got.err().message,
            "chat template line 2: raise_exception: Roles must alternate");
}

TEST(chat_template, undefined_attribute_of_undefined_names_it) {
  auto got =
      render("{{ messages[5].role }}", ojson::parse(R"({"messages": []})"));
  ASSERT_FALSE(got);
  EXPECT_EQ(got.err().message,
            "chat template line 1: 'list object' has no element 5");
}

TEST(chat_template, recursion_is_bounded) {
  std::string deep =
      "{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}";
  EXPECT_NE(parse_error(deep).find("nested deeper than"), std::string::npos);
  std::string ifs;
  for (int i = 0; i < 300; ++i)
    ifs += "{% if true %}";
  for (int i = 0; i < 300; ++i)
    ifs += "{% endif %}";
  EXPECT_NE(parse_error(ifs).find("nested deeper than"), std::string::npos);
  std::string nots = "{{ ";
  for (int i = 0; i < 5000; ++i)
    nots += "not ";
  nots += "x }}";
  EXPECT_NE(parse_error(nots).find("nested deeper than"), std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i)
    chain += " + 1";
  chain += " }}";
  EXPECT_NE(parse_error(chain).find("expression nested deeper than 200"),
            std::string::npos);
  auto got = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
                    ojson::object());
  ASSERT_FALSE(got);
  EXPECT_NE(got.err().message.find("calls nested deeper than 32"),
            std::string::npos);
  EXPECT_EQ(got.err().code, ec::capacity_exceeded);
}

TEST(chat_template, deep_context_is_refused_not_a_crash) {
  ojson v = "leaf";
  for (int i = 0; i < 100000; ++i) {
    ojson a = ojson::array();
    a.push_back(std::move(v));
    v = std::move(a);
  }
  ojson ctx = {{"v", std::move(v)}};
  auto got = render("{{ v | tojson }}", ctx);
  ASSERT_FALSE(got);
  EXPECT_NE(got.err().message.find("nested too deeply"), std::string::npos);
  EXPECT_EQ(got.err().code, ec::capacity_exceeded);
  got = render("{{ v }}", ctx);
  ASSERT_FALSE(got);
  EXPECT_NE(got.err().message.find("nested too deeply"), std::string::npos);
  got = render("{{ v == v }}", ctx);
  EXPECT_TRUE(got) << got.err().message;  // the same JSON node: equal at once
  // Destroying 100000 nested arrays is nlohmann's (iterative since 3.10).
}

TEST(chat_template, output_is_bounded) {
  chat_template_render_options small = fixed_clock();
  small.max_output = 1000;
  auto got =
      render("{% for i in range(2000) %}x{% endfor %}", ojson::object(), small);
  ASSERT_FALSE(got);
  EXPECT_NE(got.err().message.find("would exceed 1000 bytes"),
            std::string::npos);
  EXPECT_EQ(got.err().code, ec::capacity_exceeded);
  // A string doubled in a namespace, never printed: refused at 64 MB.
  got = render(
      "{% set ns = namespace(s='x') %}{% for i in range(64) %}"
      "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}",
      ojson::object());
  ASSERT_FALSE(got);
  EXPECT_NE(got.err().message.find("would exceed 67108864 bytes"),
            std::string::npos);
  got = render("{{ 'ab' * 100000000 }}", ojson::object());
  ASSERT_FALSE(got);
}

TEST(chat_template, evaluation_steps_are_bounded) {
  chat_template_render_options few = fixed_clock();
  few.max_steps = 100000;
  auto got = render(
      "{% for i in range(1000) %}{% for j in range(1000) %}"
      "{% endfor %}{% endfor %}",
      ojson::object(), few);
  ASSERT_FALSE(got);
  EXPECT_NE(got.err().message.find("budget of 100000 evaluation steps"),
            std::string::npos);
  EXPECT_EQ(got.err().code, ec::capacity_exceeded);
  got = render("{{ range(2000000) | length }}", ojson::object());
  ASSERT_FALSE(got);
  EXPECT_NE(got.err().message.find("range() of more than"), std::string::npos);
}

// vLLM's content format: a template that loops over a message's content
// gets a list of parts; its detection read from the AST as vLLM reads it.
TEST(chat_template, takes_content_parts_when_it_loops_over_a_message_content) {
  auto parts = [](const std::string& source) {
    auto t = chat_template::parse(source);
    EXPECT_TRUE(t) << t.err().message;
    return t && t->takes_content_parts();
  };
  EXPECT_TRUE(
      parts("{% for m in messages %}{% for p in m['content'] %}{{ p.text }}"
            "{% endfor %}{% endfor %}"));
  EXPECT_TRUE(
      parts("{% for m in messages %}{% for p in m.content | selectattr('type', "
            "'equalto', 'text') %}{{ p.text }}{% endfor %}{% endfor %}"));
  // Through a name set from the messages, a slice, a filter, an if.
  EXPECT_TRUE(parts(
      "{% set loop_messages = messages[1:] %}{% set rest = loop_messages %}"
      "{% for m in rest | reverse %}{% if m.content is string %}x{% else %}"
      "{% for p in m.content[0:] %}{{ p.text }}{% endfor %}{% endif %}"
      "{% endfor %}"));
  EXPECT_FALSE(
      parts("{% for m in messages %}{{ m['content'] | trim }}{% endfor %}"));
  EXPECT_FALSE(parts("{% for p in content %}{{ p }}{% endfor %}"));
  // A loop over something else's content.
  EXPECT_FALSE(
      parts("{% for m in messages %}{% for p in tools[0].content %}{% endfor %}"
            "{% endfor %}"));
  // vLLM's assertions fail on anything but a plain name: strings then.
  EXPECT_FALSE(
      parts("{% for m in messages %}{% for a, b in m.content %}{% endfor %}"
            "{% endfor %}"));
  EXPECT_FALSE(
      parts("{% set ns = namespace() %}{% set ns.m = messages %}"
            "{% for m in messages %}{% for p in m.content %}{% endfor %}"
            "{% endfor %}"));
  // A cycle of names is read once.
  EXPECT_TRUE(parts(
      "{% set a = messages %}{% set b = a %}{% set a = b %}"
      "{% for m in b %}{% for p in m.content %}{% endfor %}{% endfor %}"));
  // Inside a macro too (Jinja's find_all sees every node).
  EXPECT_TRUE(parts(
      "{% macro show(ms) %}{% for m in messages %}{% for p in m.content %}"
      "{% endfor %}{% endfor %}{% endmacro %}{{ show(1) }}"));
}

TEST(chat_template, context_must_be_an_object) {
  auto t = chat_template::parse("x");
  ASSERT_TRUE(t);
  auto got = t->render(ojson::array());
  ASSERT_FALSE(got);
  EXPECT_EQ(got.err().code, ec::invalid_argument);
}

TEST(chat_template, renders_the_qwen_tools_branch) {
  // The tools branch of Qwen 2.5's template, as in its tokenizer_config.json.
  const char* qwen_tools = R"~~({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == "assistant" and message.tool_calls %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
    {%- endif %}
{%- endfor %})~~";
  ojson ctx = ojson::parse(
      R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": "é"}}}],
    "messages": [{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": {"q": "x", "n": 2.5}}}]}]})");
  auto got = render(qwen_tools, ctx);
  ASSERT_TRUE(got) << got.err().message;
  EXPECT_EQ(*got,
            "<|im_start|>system\n\n{\"type\": \"function\", \"function\": "
            "{\"name\": \"f\", "
            "\"parameters\": {\"z\": 1, \"a\": "
            "\"é\"}}}\n<tool_call>\n{\"name\": \"f\", "
            "\"arguments\": {\"q\": \"x\", \"n\": 2.5}}\n</tool_call>");
}

}  // namespace
}  // namespace kvmesh
