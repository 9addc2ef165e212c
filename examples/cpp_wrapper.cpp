// cpp_wrapper.cpp - modern_fm from C++ through the small wrapper in modern_fm.hpp.
//
// compile (from examples/):  g++ -std=c++17 -O2 -I.. cpp_wrapper.cpp -o cpp_wrapper
// run:                       ./cpp_wrapper
//
// Builds rows in C++ containers (mfm::Rows), trains a field-aware FM, evaluates it, saves it,
// loads it back into another mfm::Model and checks the predictions agree, parses a few libffm
// lines from a string (mfm::Dataset) to predict them, and shows what a failed call throws.
// No free() anywhere: every handle frees itself.
#define MODERN_FM_IMPLEMENTATION // in exactly one file of a program, before the include
#include "modern_fm.h"
#include "modern_fm.hpp"

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

// Toy clicks: 4 fields of 10 features (id = 10 * field + value); the click rate depends on
// whether the tastes of the features in fields 0 and 1 agree: a pairwise interaction.
static mfm::Rows make_rows(std::mt19937 &rng, const std::vector<double> &taste, int n_rows) {
    std::uniform_int_distribution<std::uint32_t> value(0, 9);
    std::uniform_real_distribution<double> coin(0, 1);
    mfm::Rows rows;
    for (int r = 0; r < n_rows; r++) {
        std::vector<mfm::Rows::Entry> row;
        for (std::uint32_t field = 0; field < 4; field++) row.push_back({field, 10 * field + value(rng), 1.0f});
        double score = 2.0 * taste[row[0].feature] * taste[row[1].feature];
        rows.add(coin(rng) < 1 / (1 + std::exp(-score)) ? 1.0f : 0.0f, row.begin(), row.end());
    }
    return rows;
}

int main() {
    try {
        std::mt19937 rng(1234);
        std::uniform_real_distribution<double> between(-1.5, 1.5);
        std::vector<double> taste(40);
        for (double &t : taste) t = between(rng);
        mfm::Rows train = make_rows(rng, taste, 8000), test = make_rows(rng, taste, 2000);

        mfm_params p{}; // all zero = the defaults (in C: mfm_params p = {0};)
        p.model = MFM_MODEL_FFM;
        p.k = 4;
        p.n_epochs = 5;
        mfm::Model model = mfm::Model::train(p, train); // Rows turn into an mfm_csr view
        mfm_metrics m = model.evaluate(test);
        std::printf("FFM on %zu rows: test AUC %.4f, logloss %.4f\n", train.size(), m.auc, m.logloss);

        // Save without the optimizer state (enough to predict), open it for prediction: mapped,
        // or copied into the model's own memory (slower to open, then independent of the file).
        model.save("example_cpp.mfm", false);
        mfm::Model loaded = mfm::Model::map("example_cpp.mfm");
        mfm::Model copied = mfm::Model::load_parameters("example_cpp.mfm");
        bool same = model.predict(test, MFM_OUTPUT_PROBABILITY) == loaded.predict(test, MFM_OUTPUT_PROBABILITY) &&
                    model.predict(test, MFM_OUTPUT_PROBABILITY) == copied.predict(test, MFM_OUTPUT_PROBABILITY);
        std::printf("saved, loaded back, same predictions: %s\n", same ? "ok" : "FAILED");

        // Ownership moves, never copies: `loaded` is empty after this, `server` owns the model.
        mfm::Model server = std::move(loaded);
        std::printf("the loaded model has %llu parameters (k = %d, %u fields)\n", static_cast<unsigned long long>(server.info().n_parameters),
                    server.info().k, server.info().n_fields);

        // libffm text from memory: "label field:feature:value ...", the label may be left out.
        // The two rows differ only in field 1's feature, whose taste decides the pair's sign.
        mfm::Dataset requests = mfm::Dataset::parse("0:3:1 1:13:1 2:20:1 3:30:1\n"
                                                    "0:3:1 1:14:1 2:20:1 3:30:1\n",
                                                    "requests");
        std::vector<float> p_click = server.predict(requests, MFM_OUTPUT_PROBABILITY);
        std::printf("two parsed requests: p(click) = %.4f and %.4f\n", p_click[0], p_click[1]);

        // A failed call throws mfm::Error: the status and the library's sentence.
        bool threw = false;
        try {
            mfm::Model missing = mfm::Model::load("no_such_model.mfm");
        } catch (const mfm::Error &e) {
            std::printf("loading a missing file throws mfm::Error (%s): %s\n", mfm_status_string(e.status()), e.what());
            threw = e.status() == MFM_ERR_IO;
        }
        std::printf("errors arrive as exceptions: %s\n", threw ? "ok" : "FAILED");
        return same && threw && m.auc > 0.7 ? 0 : 1;
    } catch (const mfm::Error &e) {
        std::fprintf(stderr, "cpp_wrapper: %s (%s)\n", e.what(), mfm_status_string(e.status()));
        return 1;
    }
}
