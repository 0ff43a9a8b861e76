"""Links from each bibliography entry back to the places that cite it.

sphinxcontrib-bibtex links a citation to its entry on the bibliography page, but across
documents the entry links nowhere back. This adds, under each entry, "Cited in: Chapter, ...",
each link pointing at the first citation of the entry in that page.
"""

from docutils import nodes


def add_backlinks(app, doctree, docname):
    if app.builder.format != "html":
        return
    domain = app.env.get_domain("cite")
    keys = {c.citation_id: c.key for c in domain.citations}
    for citation in doctree.findall(nodes.citation):
        key = next((keys[i] for i in citation["ids"] if i in keys), None)
        if key is None:
            continue
        paragraph = nodes.paragraph(classes=["cited-in"])
        seen = set()  # one link per citing page: its first citation of the entry
        for ref in domain.citation_refs:
            if ref.docname in seen or not any(target.key == key for target in ref.targets):
                continue
            seen.add(ref.docname)
            uri = app.builder.get_relative_uri(docname, ref.docname) + "#" + ref.citation_ref_id
            title = app.env.titles[ref.docname].astext()
            paragraph += nodes.Text(", " if len(paragraph) else "Cited in: ")
            paragraph += nodes.reference("", title, internal=True, refuri=uri)
        if len(paragraph):
            citation += paragraph


def setup(app):
    app.connect("doctree-resolved", add_backlinks)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
