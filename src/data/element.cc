#include "dist/data/element.h"

#include <sstream>
#include <unordered_set>

#include "dist/core/error.h"

namespace dist::data {
namespace {

std::string listed(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + ("'" + n + "'");
  return s;
}

}  // namespace

Element::Names Element::make_names(std::vector<std::string> names) {
  std::unordered_set<std::string_view> seen;
  for (size_t i = 0; i < names.size(); ++i) {
    DIST_CHECK_ARG(!names[i].empty(), "element component ", i,
                   " has an empty name; name every component");
    DIST_CHECK_ARG(seen.insert(names[i]).second, "element component name '", names[i],
                   "' is given twice (components ", listed(names),
                   "); each name must be unique, as a dict's keys");
  }
  return std::make_shared<const std::vector<std::string>>(std::move(names));
}

Element::Element(std::initializer_list<std::pair<std::string, at::Tensor>> components)
    : Element(std::vector<std::pair<std::string, at::Tensor>>(components)) {}

Element::Element(std::vector<std::pair<std::string, at::Tensor>> components) {
  std::vector<std::string> names;
  reserve(components.size());
  for (auto& [name, tensor] : components) {
    names.push_back(std::move(name));
    push_back(std::move(tensor));
  }
  names_ = make_names(std::move(names));
}

Element::Element(std::vector<at::Tensor> tensors, Names names)
    : std::vector<at::Tensor>(std::move(tensors)) {
  set_names(std::move(names));
}

void Element::set_names(Names names) {
  DIST_CHECK_ARG(names == nullptr || names->size() == size(), "an element of ", size(),
                 " components cannot take the ", names ? names->size() : 0, " names ",
                 names ? listed(*names) : "", ": give one name per component");
  names_ = std::move(names);
}

const std::vector<std::string>& Element::names() const {
  static const std::vector<std::string> kNone;
  return names_ ? *names_ : kNone;
}

int64_t Element::index_of(std::string_view name) const {
  if (!names_) return -1;
  for (size_t i = 0; i < names_->size(); ++i)
    if ((*names_)[i] == name) return static_cast<int64_t>(i);
  return -1;
}

const at::Tensor& Element::operator[](std::string_view name) const {
  const int64_t i = index_of(name);
  if (i < 0) {
    DIST_CHECK_ARG(names_ != nullptr, "the element has no component named '", name, "': its ",
                   size(),
                   " components are unnamed (read them by position, or name them: "
                   "from_tensor_slices({{\"name\", tensor}, ...}), a FeatureSpec, or a map "
                   "that returns a named Element)");
    DIST_CHECK_ARG(false, "the element has no component named '", name, "'; its components are ",
                   listed(*names_));
  }
  // A positional edit (push_back, erase) after naming would leave a name without a component.
  DIST_CHECK_ARG(static_cast<size_t>(i) < size(), "component '", name, "' is number ", i,
                 " of the element's names, but the element has only ", size(),
                 " components: components were removed after naming; name them again");
  return std::vector<at::Tensor>::operator[](static_cast<size_t>(i));
}

at::Tensor& Element::operator[](std::string_view name) {
  return const_cast<at::Tensor&>(std::as_const(*this)[name]);
}

std::string Element::describe() const {
  std::ostringstream s;
  s << "{";
  for (size_t i = 0; i < size(); ++i) {
    if (i) s << ", ";
    if (names_ && i < names_->size()) s << (*names_)[i] << ": ";
    const at::Tensor& t = std::vector<at::Tensor>::operator[](i);
    if (t.defined())
      s << t.sizes() << " " << t.scalar_type();
    else
      s << "undefined";
  }
  s << "}";
  return s.str();
}

}  // namespace dist::data
