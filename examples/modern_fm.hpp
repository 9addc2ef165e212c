// modern_fm.hpp - a small C++17 wrapper around modern_fm.h: owning handles and exceptions.
//
// Copy it next to modern_fm.h if you like it; it is an example, not part of the library.
//
//   mfm::Model    owns an mfm_model: train, fit, predict, evaluate, save, load. Move-only.
//   mfm::Dataset  owns an mfm_dataset read from a file or parsed from text. Move-only.
//   mfm::Rows     builds CSR arrays in std::vectors, row by row, and lends them as mfm_csr.
//   mfm::Error    what every failed call throws: status() is the mfm_status, what() the
//                 library's one-sentence message.
//
// Data goes in as `const mfm_csr &`; Dataset and Rows turn into one by themselves (a view that
// lives as long as they do). Parameters are the C struct: `mfm_params p{};` is the defaults.
//
// In one .cpp file of the program, before including this header:
//     #define MODERN_FM_IMPLEMENTATION
//     #include "modern_fm.h"
#ifndef MODERN_FM_HPP
#define MODERN_FM_HPP

#include "modern_fm.h"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace mfm {

// ---- errors --------------------------------------------------------------------------------

class Error : public std::runtime_error {
public:
    Error(mfm_status status, const std::string &message) : std::runtime_error(message), status_(status) {}
    mfm_status status() const noexcept { return status_; }

private:
    mfm_status status_;
};

namespace detail {
// Every wrapped call goes through here: anything but MFM_OK becomes an Error.
inline void check(mfm_status status, const mfm_error &e) {
    if (status != MFM_OK) throw Error(status, e.message);
}
} // namespace detail

// ---- data ----------------------------------------------------------------------------------

// CSR arrays built row by row. The mfm_csr it lends points into its vectors: do not add rows
// while a view of it is in use.
class Rows {
public:
    struct Entry {
        std::uint32_t field, feature;
        float value = 1.0f;
    };

    void add(float label, std::initializer_list<Entry> entries) { add(label, entries.begin(), entries.end()); }
    template <class Iterator> void add(float label, Iterator first, Iterator last) {
        for (; first != last; ++first) {
            fields_.push_back(first->field);
            features_.push_back(first->feature);
            values_.push_back(first->value);
        }
        offsets_.push_back(features_.size());
        labels_.push_back(label);
    }
    std::size_t size() const noexcept { return labels_.size(); }

    mfm_csr csr() const noexcept {
        mfm_csr d{}; // n_features and n_fields 0: the library infers them
        d.n_rows = labels_.size();
        d.row_offsets = offsets_.data();
        d.features = features_.data();
        d.fields = fields_.data();
        d.values = values_.data();
        d.labels = labels_.data();
        return d;
    }
    operator mfm_csr() const noexcept { return csr(); }

private:
    std::vector<std::uint64_t> offsets_{0};
    std::vector<std::uint32_t> features_, fields_;
    std::vector<float> values_, labels_;
};

// A dataset the library owns (parsed text, or a binary file mapped into memory).
class Dataset {
public:
    // options nullptr: detect the format, binary labels, every core
    static Dataset read(const std::string &path, const mfm_read_options *options = nullptr) {
        mfm_read_options defaults{};
        mfm_dataset *d = nullptr;
        mfm_error e;
        detail::check(mfm_dataset_read(path.c_str(), options ? options : &defaults, &d, &e), e);
        return Dataset(d);
    }
    static Dataset parse(const std::string &text, const std::string &name = "text", const mfm_read_options *options = nullptr) {
        mfm_read_options defaults{};
        mfm_dataset *d = nullptr;
        mfm_error e;
        detail::check(mfm_dataset_parse(text.data(), text.size(), name.c_str(), options ? options : &defaults, &d, &e), e);
        return Dataset(d);
    }

    Dataset(Dataset &&other) noexcept : dataset_(std::exchange(other.dataset_, nullptr)) {}
    Dataset &operator=(Dataset &&other) noexcept {
        if (this != &other) {
            mfm_dataset_free(dataset_);
            dataset_ = std::exchange(other.dataset_, nullptr);
        }
        return *this;
    }
    Dataset(const Dataset &) = delete;
    Dataset &operator=(const Dataset &) = delete;
    ~Dataset() { mfm_dataset_free(dataset_); }

    mfm_csr csr() const noexcept { return mfm_dataset_csr(dataset_); }
    operator mfm_csr() const noexcept { return csr(); }
    mfm_dataset_info info() const noexcept {
        mfm_dataset_info i{};
        mfm_dataset_get_info(dataset_, &i);
        return i;
    }
    std::size_t size() const noexcept { return static_cast<std::size_t>(info().n_rows); }
    mfm_dataset *get() const noexcept { return dataset_; }

private:
    explicit Dataset(mfm_dataset *d) noexcept : dataset_(d) {}
    mfm_dataset *dataset_ = nullptr;
};

// ---- models --------------------------------------------------------------------------------

class Model {
public:
    // A fresh model of a given shape (n_classes: multiclass only).
    static Model create(const mfm_params &params, std::uint32_t n_features, std::uint32_t n_fields, std::uint32_t n_classes = 0) {
        mfm_model *m = nullptr;
        mfm_error e;
        detail::check(mfm_model_create(&params, n_features, n_fields, n_classes, &m, &e), e);
        return Model(m);
    }
    // A model shaped by the data, trained params.n_epochs epochs.
    static Model train(const mfm_params &params, const mfm_csr &data) {
        mfm_model *m = nullptr;
        mfm_error e;
        detail::check(mfm_train(&params, &data, &m, &e), e);
        return Model(m);
    }
    // For training: parameters and state read into memory.
    static Model load(const std::string &path) {
        mfm_model *m = nullptr;
        mfm_error e;
        detail::check(mfm_model_load(path.c_str(), &m, &e), e);
        return Model(m);
    }
    // For prediction: the parameters verified and mapped read-only in place (mfm_model_map).
    static Model map(const std::string &path) {
        mfm_model *m = nullptr;
        mfm_error e;
        detail::check(mfm_model_map(path.c_str(), &m, &e), e);
        return Model(m);
    }
    // For prediction: the parameters verified and copied into memory of the model's own
    // (mfm_model_load_parameters): slower to open, faster one-row answers, no file kept open.
    static Model load_parameters(const std::string &path) {
        mfm_model *m = nullptr;
        mfm_error e;
        detail::check(mfm_model_load_parameters(path.c_str(), &m, &e), e);
        return Model(m);
    }

    Model(Model &&other) noexcept : model_(std::exchange(other.model_, nullptr)) {}
    Model &operator=(Model &&other) noexcept {
        if (this != &other) {
            mfm_model_free(model_);
            model_ = std::exchange(other.model_, nullptr);
        }
        return *this;
    }
    Model(const Model &) = delete; // copies are explicit: clone()
    Model &operator=(const Model &) = delete;
    ~Model() { mfm_model_free(model_); }

    Model clone() const {
        mfm_model *m = nullptr;
        mfm_error e;
        detail::check(mfm_model_clone(model_, &m, &e), e);
        return Model(m);
    }

    // More epochs from where it stands (warm start); with validation rows, early stopping.
    void fit(const mfm_csr &data) {
        mfm_error e;
        detail::check(mfm_fit(model_, &data, &e), e);
    }
    void fit(const mfm_csr &data, const mfm_csr &validation) {
        mfm_error e;
        detail::check(mfm_fit_validated(model_, &data, &validation, &e), e);
    }
    // One pass over the rows in their order (streams, online learning).
    void partial_fit(const mfm_csr &data) {
        mfm_error e;
        detail::check(mfm_partial_fit(model_, &data, &e), e);
    }

    // n_rows x output_width(kind) values (multiclass probabilities: C per row).
    std::vector<float> predict(const mfm_csr &data, mfm_output kind = MFM_OUTPUT_DEFAULT) const {
        std::vector<float> out(static_cast<std::size_t>(data.n_rows) * mfm_output_width(model_, kind));
        mfm_error e;
        detail::check(mfm_predict(model_, &data, kind, out.data(), out.size(), &e), e);
        return out;
    }
    mfm_metrics evaluate(const mfm_csr &data) const {
        mfm_metrics m{};
        mfm_error e;
        detail::check(mfm_evaluate(model_, &data, &m, &e), e);
        return m;
    }

    // with_state: keep the optimizer state too, so that training can resume exactly.
    void save(const std::string &path, bool with_state = true) const {
        mfm_error e;
        detail::check(mfm_model_save(model_, path.c_str(), with_state ? 1 : 0, &e), e);
    }

    void set_params(const mfm_params &params) {
        mfm_error e;
        detail::check(mfm_model_set_params(model_, &params, &e), e);
    }
    void set_threads(int n_threads) {
        mfm_error e;
        detail::check(mfm_model_set_threads(model_, n_threads, &e), e);
    }
    const mfm_params &params() const noexcept { return *mfm_model_params(model_); }
    mfm_model_info info() const noexcept {
        mfm_model_info i{};
        mfm_model_get_info(model_, &i);
        return i;
    }
    mfm_model *get() const noexcept { return model_; } // for the C functions not wrapped here

private:
    explicit Model(mfm_model *m) noexcept : model_(m) {}
    mfm_model *model_ = nullptr;
};

} // namespace mfm

#endif // MODERN_FM_HPP
