// Element: one element of a dataset, a tuple of tensors whose components may carry names.
//
// tf.data's elements are dicts of named tensors ({"image": ..., "label": ...}); this library's
// were positional tuples. An Element is both: a std::vector<at::Tensor>, so every positional
// use (e[0], e.size(), range-for, push_back) reads as before, that may carry one shared,
// immutable list of names, one per component:
//
//   Element e{{"tokens", ids}, {"mask", mask}};   // named, as a dict
//   e["tokens"]; e[0];                            // the same tensor
//   Element p{image, label};                      // positional, as before
//
// Stages that rebuild an element from another (batch, padded_batch, unbatch, shuffle, cache,
// prefetch, take, ...) keep its names; zip joins them when every input is named; a map
// function keeps them when it returns the element it was given (modified in place) and drops
// them when it returns a new, unnamed one. The names are shared between all elements of a
// dataset (a pointer copy per element), never copied per element.
//
// Thread safety: as std::vector; the names are immutable and may be shared by any threads.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace dist::data {

class Element : public std::vector<at::Tensor> {
 public:
  // One name per component, in component order; shared and never modified once made.
  using Names = std::shared_ptr<const std::vector<std::string>>;

  // Checks `names` (none empty, none repeated: InvalidArgument naming it) and makes the
  // shared list. Make it once per dataset and hand it to every element.
  static Names make_names(std::vector<std::string> names);

  // Positional construction, as std::vector: Element{image, label}, Element(tensors), ...
  using std::vector<at::Tensor>::vector;
  Element() = default;
  Element(std::vector<at::Tensor> tensors)  // NOLINT(google-explicit-constructor): a tuple
      : std::vector<at::Tensor>(std::move(tensors)) {}
  // Named components, as a dict literal: Element{{"image", image}, {"label", label}}.
  Element(std::initializer_list<std::pair<std::string, at::Tensor>> components);
  explicit Element(std::vector<std::pair<std::string, at::Tensor>> components);
  // `tensors` named by `names` (one name per tensor; nullptr: unnamed).
  Element(std::vector<at::Tensor> tensors, Names names);

  // Positional access, as std::vector.
  using std::vector<at::Tensor>::operator[];
  // The component named `name`. Throws InvalidArgument naming `name` and the names there are
  // (or saying the element has none, only positions).
  at::Tensor& operator[](std::string_view name);
  const at::Tensor& operator[](std::string_view name) const;
  // The position of the component named `name`, or -1 (also when the element is unnamed).
  int64_t index_of(std::string_view name) const;
  bool contains(std::string_view name) const { return index_of(name) >= 0; }

  bool has_names() const { return names_ != nullptr; }
  // The names, in component order; empty for an unnamed element.
  const std::vector<std::string>& names() const;
  const Names& shared_names() const { return names_; }
  // Names the components (one name per component: InvalidArgument otherwise); nullptr
  // removes the names.
  void set_names(Names names);

  // "{image: [3, 32, 32] float, label: [] long}" or "{[3, 32, 32] float, [] long}": for errors.
  std::string describe() const;

 private:
  Names names_;
};

}  // namespace dist::data
