// ImGui's draw data in runs of triangles by what they need (renderer.h, core/draw_runs.h).
#include "app/renderer.h"

#if defined(__EMSCRIPTEN__)
#include <GLES3/gl3.h>
#else
#define GL_GLEXT_PROTOTYPES 1
#include <GL/gl.h>
#include <GL/glext.h>
#endif

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/common/error.h"

namespace kvscope::ui {

namespace {

// The attributes' locations, the same in both programs so one vertex array serves both.
constexpr GLuint kPos = 0, kUv = 1, kColor = 2;

#if defined(__EMSCRIPTEN__)
constexpr const char* kVertexHead = "#version 300 es\nprecision highp float;\n";
constexpr const char* kFragmentHead =
    "#version 300 es\nprecision mediump float;\nlayout (location = 0) out vec4 out_color;\n";
#else
constexpr const char* kVertexHead = "#version 130\n";
constexpr const char* kFragmentHead = "#version 130\nout vec4 out_color;\n";
#endif

// ImGui's backend's arithmetic: the vertex colour times the atlas's sample; a flat triangle's
// sample is the white texel, 1.0, so the flat program's colour is the vertex colour itself.
constexpr const char* kTexturedVertex =
    "uniform mat4 proj;\n"
    "in vec2 pos;\nin vec2 uv;\nin vec4 color;\n"
    "out vec2 frag_uv;\nout vec4 frag_color;\n"
    "void main() {\n"
    "  frag_uv = uv;\n  frag_color = color;\n  gl_Position = proj * vec4(pos.xy, 0, 1);\n"
    "}\n";
constexpr const char* kTexturedFragment =
    "uniform sampler2D atlas;\n"
    "in vec2 frag_uv;\nin vec4 frag_color;\n"
    "void main() { out_color = frag_color * texture(atlas, frag_uv.st); }\n";
constexpr const char* kFlatVertex =
    "uniform mat4 proj;\n"
    "in vec2 pos;\nin vec4 color;\n"
    "out vec4 frag_color;\n"
    "void main() { frag_color = color; gl_Position = proj * vec4(pos.xy, 0, 1); }\n";
constexpr const char* kFlatFragment =
    "in vec4 frag_color;\n"
    "void main() { out_color = frag_color; }\n";

// `object`, a shader or a program, once compiled or linked; else it is deleted and the driver's
// log thrown.
GLuint checked(GLuint object, bool program) {
  GLint ok = 0;
  if (program)
    glGetProgramiv(object, GL_LINK_STATUS, &ok);
  else
    glGetShaderiv(object, GL_COMPILE_STATUS, &ok);
  if (ok == GL_TRUE) return object;
  char log[1024] = {};
  if (program) {
    glGetProgramInfoLog(object, sizeof log, nullptr, log);
    glDeleteProgram(object);
  } else {
    glGetShaderInfoLog(object, sizeof log, nullptr, log);
    glDeleteShader(object);
  }
  throw Error("renderer", std::string("the OpenGL driver refused a ") +
                              (program ? "program: " : "shader: ") + log);
}

GLuint compile(GLenum type, const char* head, const char* body) {
  const GLuint shader = glCreateShader(type);
  const char* parts[] = {head, body};
  glShaderSource(shader, 2, parts, nullptr);
  glCompileShader(shader);
  return checked(shader, false);
}

GLuint link(const char* vertex, const char* fragment, bool with_uv) {
  const GLuint vs = compile(GL_VERTEX_SHADER, kVertexHead, vertex);
  GLuint fs = 0;
  try {
    fs = compile(GL_FRAGMENT_SHADER, kFragmentHead, fragment);
  } catch (...) {
    glDeleteShader(vs);
    throw;
  }
  const GLuint program = glCreateProgram();
  glAttachShader(program, vs);
  glAttachShader(program, fs);
  glBindAttribLocation(program, kPos, "pos");
  if (with_uv) glBindAttribLocation(program, kUv, "uv");
  glBindAttribLocation(program, kColor, "color");
  glLinkProgram(program);
  glDetachShader(program, vs);
  glDetachShader(program, fs);
  glDeleteShader(vs);
  glDeleteShader(fs);
  return checked(program, true);
}

constexpr GLenum kIndexType = sizeof(ImDrawIdx) == 2 ? GL_UNSIGNED_SHORT : GL_UNSIGNED_INT;

}  // namespace

DrawRenderer::DrawRenderer() : textured_program_(link(kTexturedVertex, kTexturedFragment, true)) {
  try {
    flat_program_ = link(kFlatVertex, kFlatFragment, false);
  } catch (...) {
    glDeleteProgram(textured_program_);
    throw;
  }
  textured_proj_ = glGetUniformLocation(textured_program_, "proj");
  flat_proj_ = glGetUniformLocation(flat_program_, "proj");
  atlas_ = glGetUniformLocation(textured_program_, "atlas");
  glGenVertexArrays(1, &vao_);
  glGenBuffers(1, &vbo_);
  glGenBuffers(1, &ebo_);
  glBindVertexArray(vao_);
  glBindBuffer(GL_ARRAY_BUFFER, vbo_);
  glBindBuffer(GL_ELEMENT_ARRAY_BUFFER, ebo_);  // part of the vertex array's state
  glEnableVertexAttribArray(kPos);
  glEnableVertexAttribArray(kUv);
  glEnableVertexAttribArray(kColor);
  point_attributes(0);
  glBindVertexArray(0);
}

DrawRenderer::~DrawRenderer() {
  glDeleteBuffers(1, &ebo_);
  glDeleteBuffers(1, &vbo_);
  glDeleteVertexArrays(1, &vao_);
  glDeleteProgram(flat_program_);
  glDeleteProgram(textured_program_);
}

// The attributes read from vertex `vertex_offset` on (a command's VtxOffset: desktop GL 3.0 and
// WebGL 2 have no base-vertex draw).
void DrawRenderer::point_attributes(unsigned vertex_offset) {
  const std::uintptr_t base = static_cast<std::uintptr_t>(vertex_offset) * sizeof(ImDrawVert);
  const auto at = [base](std::size_t field) { return reinterpret_cast<const void*>(base + field); };
  glVertexAttribPointer(kPos, 2, GL_FLOAT, GL_FALSE, sizeof(ImDrawVert),
                        at(offsetof(ImDrawVert, pos)));
  glVertexAttribPointer(kUv, 2, GL_FLOAT, GL_FALSE, sizeof(ImDrawVert),
                        at(offsetof(ImDrawVert, uv)));
  glVertexAttribPointer(kColor, 4, GL_UNSIGNED_BYTE, GL_TRUE, sizeof(ImDrawVert),
                        at(offsetof(ImDrawVert, col)));
}

void DrawRenderer::render(const ImDrawData& data) {
  const int fb_w = static_cast<int>(data.DisplaySize.x * data.FramebufferScale.x);
  const int fb_h = static_cast<int>(data.DisplaySize.y * data.FramebufferScale.y);
  if (fb_w <= 0 || fb_h <= 0) return;

  glDisable(GL_CULL_FACE);
  glDisable(GL_DEPTH_TEST);
  glDisable(GL_STENCIL_TEST);
  glEnable(GL_SCISSOR_TEST);
  glBlendEquation(GL_FUNC_ADD);
  glBlendFuncSeparate(GL_SRC_ALPHA, GL_ONE_MINUS_SRC_ALPHA, GL_ONE, GL_ONE_MINUS_SRC_ALPHA);
  glViewport(0, 0, fb_w, fb_h);
  // ImGui's orthographic projection: its display rectangle onto the viewport, y down.
  const float l = data.DisplayPos.x, r = data.DisplayPos.x + data.DisplaySize.x;
  const float t = data.DisplayPos.y, b = data.DisplayPos.y + data.DisplaySize.y;
  // clang-format off
  const float proj[16] = {
      2.0f / (r - l),    0.0f,              0.0f,  0.0f,
      0.0f,              2.0f / (t - b),    0.0f,  0.0f,
      0.0f,              0.0f,              -1.0f, 0.0f,
      (r + l) / (l - r), (t + b) / (b - t), 0.0f,  1.0f};
  // clang-format on
  glUseProgram(flat_program_);
  glUniformMatrix4fv(flat_proj_, 1, GL_FALSE, proj);
  glUseProgram(textured_program_);
  glUniformMatrix4fv(textured_proj_, 1, GL_FALSE, proj);
  glUniform1i(atlas_, 0);
  glActiveTexture(GL_TEXTURE0);
  glBindVertexArray(vao_);
  glBindBuffer(GL_ARRAY_BUFFER, vbo_);

  // The state last set: program (textured or not), blend, texture, attributes' vertex offset.
  bool textured = true;
  bool blended = false;
  glDisable(GL_BLEND);
  ImTextureID texture{};
  bool texture_bound = false;
  unsigned vertex_offset = 0;
  point_attributes(0);

  const ImVec2 white = ImGui::GetIO().Fonts->TexUvWhitePixel;
  const DrawCosts costs;
  const ImVec2 clip_off = data.DisplayPos, clip_scale = data.FramebufferScale;
  for (int n = 0; n < data.CmdListsCount; ++n) {
    const ImDrawList& list = *data.CmdLists[n];
    glBufferData(GL_ARRAY_BUFFER, static_cast<GLsizeiptr>(list.VtxBuffer.Size) * sizeof(ImDrawVert),
                 list.VtxBuffer.Data, GL_STREAM_DRAW);
    glBufferData(GL_ELEMENT_ARRAY_BUFFER,
                 static_cast<GLsizeiptr>(list.IdxBuffer.Size) * sizeof(ImDrawIdx),
                 list.IdxBuffer.Data, GL_STREAM_DRAW);
    for (const ImDrawCmd& cmd : list.CmdBuffer) {
      if (cmd.UserCallback != nullptr) {
        // kvscope adds no callbacks; ImGui's own reset asks for nothing this renderer changes.
        if (cmd.UserCallback != ImDrawCallback_ResetRenderState) cmd.UserCallback(&list, &cmd);
        continue;
      }
      const float x0 = (cmd.ClipRect.x - clip_off.x) * clip_scale.x;
      const float y0 = (cmd.ClipRect.y - clip_off.y) * clip_scale.y;
      const float x1 = (cmd.ClipRect.z - clip_off.x) * clip_scale.x;
      const float y1 = (cmd.ClipRect.w - clip_off.y) * clip_scale.y;
      if (x1 <= x0 || y1 <= y0) continue;
      glScissor(static_cast<int>(x0), static_cast<int>(static_cast<float>(fb_h) - y1),
                static_cast<int>(x1 - x0), static_cast<int>(y1 - y0));
      if (cmd.VtxOffset != vertex_offset) {
        vertex_offset = cmd.VtxOffset;
        point_attributes(vertex_offset);
      }
      runs_.clear();
      split_draw_runs(list, cmd, white, costs, runs_);
      for (const DrawRun& run : runs_) {
        if (run.textured != textured) {
          textured = run.textured;
          glUseProgram(textured ? textured_program_ : flat_program_);
        }
        if (run.blended != blended) {
          blended = run.blended;
          if (blended)
            glEnable(GL_BLEND);
          else
            glDisable(GL_BLEND);
        }
        if (textured && (!texture_bound || cmd.GetTexID() != texture)) {
          texture = cmd.GetTexID();
          texture_bound = true;
          glBindTexture(GL_TEXTURE_2D,
                        static_cast<GLuint>(reinterpret_cast<std::intptr_t>(texture)));
        }
        const std::uintptr_t offset = (cmd.IdxOffset + run.first) * sizeof(ImDrawIdx);
        glDrawElements(GL_TRIANGLES, static_cast<GLsizei>(run.count), kIndexType,
                       reinterpret_cast<const void*>(offset));
      }
    }
  }
  glBindVertexArray(0);
  glEnable(GL_BLEND);
  glDisable(GL_SCISSOR_TEST);  // the next frame's clear covers the whole window
}

}  // namespace kvscope::ui
