// How messages about TorchScript modules name a file and a value (torchscript_model.h). Private.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>

namespace dist::models {

// "'<file>'", or "(not loaded from a file)" for "".
std::string describe_file(const std::string& file);

// What a forward returned, for a message: "a tuple of 2 (Tensor, Tensor)", "a list of 1
// (Tensor)", "None", "an int (3)", "a tensor of shape [4, 10] and dtype Float".
std::string describe_value(const c10::IValue& value);

// An exception's message up to its first line break: TorchScript appends its traceback.
std::string first_line(const std::string& message);

// The line of a TorchScript interpreter's message that names the Python exception
// ("builtins.ValueError: ..."), else its first line.
std::string exception_line(const std::string& message);

}  // namespace dist::models
