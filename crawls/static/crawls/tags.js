// Turns a comma-separated tags input (data-tags) into removable chips with a small text
// box: Enter or a comma adds a tag, the × removes one. The input itself stays in the form
// (hidden) and always holds the tags as "a, b", which the server reads.
"use strict";
(function () {
  function tagsOf(input) {
    return input.value.split(",").map((tag) => tag.trim()).filter(Boolean);
  }

  function enhance(input) {
    const box = document.createElement("span");
    box.className = "tags-box";
    const typing = document.createElement("input");
    typing.type = "text";
    typing.className = "tags-typing";
    typing.placeholder = "add a tag";
    typing.setAttribute("aria-label", "add a tag");

    function render() {
      box.querySelectorAll(".tag-chip").forEach((chip) => chip.remove());
      for (const tag of tagsOf(input)) {
        const chip = document.createElement("span");
        chip.className = "tag-chip";
        chip.textContent = tag;
        const remove = document.createElement("button");
        remove.type = "button";
        remove.textContent = "×";
        remove.title = `remove ${tag}`;
        remove.addEventListener("click", () => {
          input.value = tagsOf(input).filter((other) => other !== tag).join(", ");
          render();
        });
        chip.appendChild(remove);
        box.insertBefore(chip, typing);
      }
    }

    function add() {
      const tag = typing.value.replace(/,/g, "").trim();
      if (tag && !tagsOf(input).includes(tag)) {
        input.value = [...tagsOf(input), tag].join(", ");
      }
      typing.value = "";
      render();
    }

    typing.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === ",") {
        event.preventDefault();
        add();
      }
    });
    typing.addEventListener("blur", add);
    box.appendChild(typing);
    input.type = "hidden";
    input.after(box);
    render();
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll("input[data-tags]").forEach(enhance);
  });
})();
